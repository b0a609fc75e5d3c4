"""A claim resumes its scan where its claimer last found work (backends/claim_position.py),
on both backends (SQLite always scans from the front; the same promises hold there). The
position is a hint: a due job behind it is still claimed, within FRONT_SCAN_SECONDS (a probe on
a thread of its own finds it and moves the position back; ``settle`` waits for it here); a
higher priority is still claimed first, whenever it came; lower priorities are still
reached."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import errands
from errands.backends.claim_position import (
    FROM_THE_FRONT,
    FRONT_SCAN_SECONDS,
    PROBE_SHARE,
    SLACK,
    ClaimPosition,
    Found,
)
from helpers.support import FixedClock, claim

T = 1_800_000_000.0


def ids(jobs: list[errands.ClaimedJob]) -> list[int]:  # type: ignore[name-defined]
    return [j.id for j in jobs]


def claim_settled(q: errands.Queue, types: list[str], now: float) -> list[int]:
    """A claim, then wait for the probe behind the position it may have started."""
    got = ids(claim(q, types, now=now))
    q.backend.claim_position.settle()  # type: ignore[attr-defined]
    return got


def test_a_claim_past_the_probe_period_resumes_and_a_probe_moves_the_position_back() -> None:
    """The front scan is the probe's, on a thread of its own: the claim itself never scans
    from the front again while it has a position."""
    position = ClaimPosition()
    assert position.params(["t"], None, T) == FROM_THE_FRONT
    position.claimed(["t"], None, T, [(0, T - 10, 7)])
    looked: list[dict[str, object]] = []

    def look(at: dict[str, object]) -> Found:
        looked.append(at)
        return (T - 3600, 3)

    later = T + FRONT_SCAN_SECONDS
    resumed = position.params(["t"], None, later)
    assert resumed == {"after_priority": 0, "after_run_at": T - 10, "after_id": 7}
    position.probe(["t"], None, later, look)
    position.settle()
    assert looked == [resumed]
    back = position.params(["t"], None, later)
    assert back["after_priority"] == 0 and back["after_run_at"] < T - 3600


def test_a_claim_that_ends_after_a_probe_moved_the_position_back_does_not_undo_it() -> None:
    position = ClaimPosition()
    position.params(["t"], None, T)
    position.claimed(["t"], None, T, [(0, T - 10, 7)])
    later = T + FRONT_SCAN_SECONDS
    position.params(["t"], None, later)  # a claim starts from the position ...
    position.probe(["t"], None, later, lambda at: (T - 3600, 3))
    position.settle()  # ... a probe finds a job behind it ...
    position.claimed(["t"], None, later, [(0, T - 1, 9)])  # ... and then the claim ends
    assert position.params(["t"], None, later)["after_run_at"] < T - 3600


def test_a_failed_probe_sends_the_next_claim_to_the_front() -> None:
    position = ClaimPosition()
    position.params(["t"], None, T)
    position.claimed(["t"], None, T, [(0, T - 10, 7)])

    def fails(at: dict[str, object]) -> Found:
        raise RuntimeError("the database went away")

    position.probe(["t"], None, T + FRONT_SCAN_SECONDS, fails)
    position.settle()
    assert position.params(["t"], None, T + FRONT_SCAN_SECONDS) == FROM_THE_FRONT


def test_a_probe_a_forked_process_inherited_does_not_stop_its_own() -> None:
    """os.fork copies the position with its parent's probe registered, a thread not alive in
    the child: the child still probes."""
    position = ClaimPosition()
    position.params(["t"], None, T)
    position.claimed(["t"], None, T, [(0, T - 10, 7)])
    position._probes[(("t",), None)] = threading.Thread(target=lambda: None)  # never alive here
    looked: list[dict[str, object]] = []

    def look(at: dict[str, object]) -> Found:
        looked.append(at)
        return None

    position.probe(["t"], None, T + FRONT_SCAN_SECONDS, look)
    position.settle()
    assert len(looked) == 1


def test_a_slow_probe_spaces_out_the_next() -> None:
    """A probe that took long (many dead entries behind the position) waits 1 / PROBE_SHARE
    times that long before the next: probing stays a bounded share of the time."""
    position = ClaimPosition()
    position.params(["t"], None, T)
    position.claimed(["t"], None, T, [(0, T - 10, 7)])
    key = (("t",), None)
    took = 2 * FRONT_SCAN_SECONDS * PROBE_SHARE  # the next waits two periods
    position._probed(key, 0, None, False, took)
    looked: list[dict[str, object]] = []

    def look(at: dict[str, object]) -> Found:
        looked.append(at)
        return None

    position.probe(["t"], None, T + FRONT_SCAN_SECONDS, look)
    position.settle()
    assert looked == []
    position.probe(["t"], None, T + 2 * FRONT_SCAN_SECONDS, look)
    position.settle()
    assert len(looked) == 1


def test_a_due_job_behind_the_position_is_claimed_within_a_probe_period(
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
    for k in range(1, 6):  # claims for a little longer than one probe period
        got += claim_settled(q, ["t"], t + k * step)
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
        got += claim_settled(q, ["t"], t + 10 * SLACK + k * FRONT_SCAN_SECONDS / 4)
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


def test_the_probe_finds_the_first_job_the_claim_would_take_behind_a_position(
    clocked_queue: errands.Queue, clock: FixedClock
) -> None:
    """``claim_behind``, the probe's query, on both dialects: at the position's priority, the
    first due job up to the position in claim order; none of a paused queue, none after it."""
    q = clocked_queue
    t = clock()
    q.pause("slow")
    paused = q.enqueue("t", {}, queue="slow", run_at=t - 300)
    old = q.enqueue("t", {}, run_at=t - 200)
    older = q.enqueue("t", {}, run_at=t - 250)
    q.enqueue("t", {}, priority=5, run_at=t - 400)  # another priority: the claim's own front
    q.enqueue("t", {}, run_at=t - 50)  # past the position
    backend: Any = q.backend
    types = backend._list(["t"])

    def behind(run_at: float, job_id: int) -> Found:
        at = {"after_priority": 0, "after_run_at": run_at, "after_id": job_id}
        found: Found = backend.claim_behind({"types": types, "queues": None, "now": t, **at})
        return found

    assert behind(t - 100, 0) == (t - 250, older)
    assert behind(t - 250, older) == (t - 250, older)  # the position's own job is behind it
    assert behind(t - 250, older - 1) is None
    q.resume("slow")
    assert behind(t - 100, 0) == (t - 300, paused)
    assert old
