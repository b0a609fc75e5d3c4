"""Where the rescuer's sweep starts (backends/lease_sweep.py): past the leases it saw expire,
from the front when it has no position, when its last front sweep is old, when its clock went
back, and never moved by a sweep that stopped at its limit. On both backends: a lease written
behind the position (a host whose clock runs behind) is still recovered within one front-sweep
period."""

from __future__ import annotations

import errands
from errands.backends.base import ClaimRequest
from errands.backends.lease_sweep import FROM_THE_FRONT, FRONT_SWEEP_SECONDS, SLACK, LeaseSweep
from helpers.support import FixedClock

T = 1_800_000_000.0


def test_the_first_sweep_starts_at_the_front_and_the_next_past_what_it_saw() -> None:
    sweep = LeaseSweep()
    assert sweep.start(T) == FROM_THE_FRONT
    sweep.swept(T, found=3, limit=1000)
    assert sweep.start(T + 1) == T - SLACK


def test_a_sweep_that_stopped_at_its_limit_or_skipped_a_row_leaves_the_position() -> None:
    sweep = LeaseSweep()
    sweep.start(T)
    sweep.swept(T, found=1000, limit=1000)  # more may lie behind: not moved
    assert sweep.start(T + 1) == FROM_THE_FRONT
    sweep.swept(T + 1, found=0, limit=1000)
    sweep.start(T + 2)
    sweep.swept(T + 2, found=1000, limit=1000)
    assert sweep.start(T + 3) == T + 1 - SLACK
    sweep.swept(T + 3, found=1, limit=1000, skipped=True)  # a locked row may stay expired
    assert sweep.start(T + 4) == T + 1 - SLACK


def test_the_sweep_starts_at_the_front_again_after_a_period_or_when_the_clock_went_back() -> None:
    sweep = LeaseSweep()
    sweep.start(T)
    sweep.swept(T, found=0, limit=1000)
    assert sweep.start(T + FRONT_SWEEP_SECONDS) == FROM_THE_FRONT
    sweep.swept(T + FRONT_SWEEP_SECONDS, found=0, limit=1000)
    assert sweep.start(T + FRONT_SWEEP_SECONDS - 5) == FROM_THE_FRONT  # clock went back


def test_a_lease_behind_the_position_is_recovered_within_a_front_sweep_period(
    clocked_queue: errands.Queue, clock: FixedClock
) -> None:
    q = clocked_queue
    job_id = q.enqueue("t", {})
    clock.advance(100.0)
    assert q.backend.rescue(clock()).recovered == []  # the position: now - SLACK
    # A worker whose clock runs 99 s behind claims it with a 1-second lease: the lease's
    # expiry lies behind the rescuer's position from the start.
    (job,) = q.backend.claim(ClaimRequest("behind", ["t"], None, 1, 1.0), clock() - 99)
    assert job.id == job_id
    recovered: list[int] = []
    for _ in range(int(FRONT_SWEEP_SECONDS) + 1):
        clock.advance(1.0)
        recovered += q.backend.rescue(clock()).recovered
    assert recovered == [job_id]
