"""A claim resumes its scan where its claimer last found work (backends/claim_position.py),
on both backends (SQLite always scans from the front; the same promises hold there). The
position is a hint: a due job behind it is still claimed, within FRONT_SCAN_SECONDS; a higher
priority is still claimed first, whenever it came; lower priorities are still reached."""

from __future__ import annotations

from collections.abc import Callable

import errands
from errands.backends.claim_position import FRONT_SCAN_SECONDS, SLACK
from helpers.support import FixedClock, claim


def ids(jobs: list[errands.ClaimedJob]) -> list[int]:  # type: ignore[name-defined]
    return [j.id for j in jobs]


def test_a_due_job_behind_the_position_is_claimed_within_a_front_scan(
    make_queue: Callable[..., errands.Queue], clock: FixedClock
) -> None:
    q = make_queue(clock=clock)
    t = clock()
    first = q.enqueue("t", {})
    assert ids(claim(q, ["t"], now=t)) == [first]  # the position is now near t
    # Due long before the position: a run_at in the past, as another host's late clock or a
    # resumed queue's old jobs would be.
    behind = q.enqueue("t", {}, run_at=t - 3600)
    got: list[int] = []
    step = FRONT_SCAN_SECONDS / 4
    for k in range(1, 6):  # claims for a little longer than one front-scan period
        got += ids(claim(q, ["t"], now=t + k * step))
    assert got == [behind]


def test_a_clock_stepped_back_scans_from_the_front_at_once(
    make_queue: Callable[..., errands.Queue], clock: FixedClock
) -> None:
    """NTP or an operator steps the clock back an hour: jobs enqueued since are due before
    the position, and a front-scan period counted on that clock would not end for an hour."""
    q = make_queue(clock=clock)
    t = clock()
    first = q.enqueue("t", {})
    assert ids(claim(q, ["t"], now=t)) == [first]
    clock.now = t - 3600
    after_the_step = q.enqueue("t", {})
    assert ids(claim(q, ["t"], now=clock.now)) == [after_the_step]


def test_a_paused_queue_resumed_is_claimed_though_the_position_passed_it(
    make_queue: Callable[..., errands.Queue], clock: FixedClock
) -> None:
    q = make_queue(clock=clock)
    t = clock()
    q.pause("slow")
    held = q.enqueue("t", {}, queue="slow")
    clock.advance(10 * SLACK)
    later = q.enqueue("t", {})
    assert ids(claim(q, ["t"], now=clock())) == [later]  # the position passes the paused job
    q.resume("slow")
    got: list[int] = []
    for k in range(1, 6):
        got += ids(claim(q, ["t"], now=t + 10 * SLACK + k * FRONT_SCAN_SECONDS / 4))
    assert got == [held]


def test_priority_order_holds_across_the_position(
    make_queue: Callable[..., errands.Queue], clock: FixedClock
) -> None:
    q = make_queue(clock=clock)
    t = clock()
    first = q.enqueue("t", {})
    assert ids(claim(q, ["t"], now=t)) == [first]
    # All due at once, enqueued after the claim, each run_at before the position's.
    low = q.enqueue("t", {}, priority=-5, run_at=t - 60)
    same = q.enqueue("t", {}, run_at=t + 1)
    high = q.enqueue("t", {}, priority=10, run_at=t - 60)
    assert ids(claim(q, ["t"], now=t + 1, limit=3)) == [high, same, low]


def test_many_claims_in_a_row_take_every_job_once_in_order(
    make_queue: Callable[..., errands.Queue], clock: FixedClock
) -> None:
    q = make_queue(clock=clock)
    t = clock()
    jobs = [q.enqueue("t", {}, run_at=t + i * 0.01, priority=i % 3) for i in range(60)]
    order = sorted(jobs, key=lambda j: (-(jobs.index(j) % 3), jobs.index(j)))
    got: list[int] = []
    for k in range(30):  # each claim a little later, the position moving with it
        got += ids(claim(q, ["t"], now=t + 1 + k * 0.05, limit=2))
    assert got == order


def test_a_burst_worker_finds_a_due_job_behind_the_position_before_it_returns(
    make_queue: Callable[..., errands.Queue], clock: FixedClock
) -> None:
    """A burst returns when a claim finds nothing: that claim scans from the front, or a job
    due behind the position (a recovered lease, another host's late clock) is left queued."""
    q = make_queue(clock=clock)
    ran: list[int] = []

    @q.task
    def t(n: int) -> None:
        ran.append(n)

    t.enqueue(n=1)
    q.run_worker(burst=True)  # the position is now near the clock
    behind = q.enqueue("t", {"n": 2}, run_at=clock() - 3600)
    q.run_worker(burst=True)
    assert ran == [1, 2]
    assert q.get(behind).status == "succeeded"  # type: ignore[union-attr]
