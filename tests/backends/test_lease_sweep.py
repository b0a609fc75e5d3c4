"""Where the rescuer's sweep starts (backends/lease_sweep.py): past the leases it saw expire,
from the front when it has no position or when its clock went back, and never moved by a sweep
that stopped at its limit. Every FRONT_SWEEP_SECONDS a probe on a thread of its own looks
behind the position and moves it back to an expired lease it finds (``settle`` waits for it
here); the sweep itself no longer starts from the front. On both backends: a lease written
behind the position (a host whose clock runs behind) is still recovered within one probe
period."""

from __future__ import annotations

from typing import Any

import errands
from errands.backends.base import ClaimRequest
from errands.backends.claim_position import PROBE_SHARE
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


def test_the_sweep_resumes_past_a_probe_period_and_restarts_when_the_clock_went_back() -> None:
    sweep = LeaseSweep()
    sweep.start(T)
    sweep.swept(T, found=0, limit=1000)
    assert sweep.start(T + FRONT_SWEEP_SECONDS) == T - SLACK  # the probe's period, not the sweep's
    sweep.swept(T + FRONT_SWEEP_SECONDS, found=0, limit=1000)
    assert sweep.start(T + FRONT_SWEEP_SECONDS - 5) == FROM_THE_FRONT  # clock went back


def test_a_probe_moves_the_position_back_to_a_lease_behind_it_and_a_sweep_ending_keeps_it() -> None:
    sweep = LeaseSweep()
    sweep.start(T)
    sweep.swept(T, found=0, limit=1000)
    later = T + FRONT_SWEEP_SECONDS
    looked: list[float] = []

    def look(after: float) -> float | None:
        looked.append(after)
        return T - 3600

    assert sweep.start(later) == T - SLACK  # a sweep starts from the position ...
    sweep.probe(later, look)
    sweep.settle()  # ... a probe finds an expired lease behind it ...
    sweep.swept(later, found=0, limit=1000)  # ... and then the sweep ends
    assert looked == [T - SLACK]
    assert sweep.start(later + 1) < T - 3600


def test_a_failed_probe_sends_the_next_sweep_to_the_front_a_slow_one_delays_the_next() -> None:
    sweep = LeaseSweep()
    sweep.start(T)
    sweep.swept(T, found=0, limit=1000)

    def fails(after: float) -> float | None:
        raise RuntimeError("the database went away")

    sweep.probe(T + FRONT_SWEEP_SECONDS, fails)
    sweep.settle()
    assert sweep.start(T + FRONT_SWEEP_SECONDS + 1) == FROM_THE_FRONT
    sweep.swept(T + FRONT_SWEEP_SECONDS + 1, found=0, limit=1000)
    # A probe that took long (many dead entries behind the position) waits 1 / PROBE_SHARE
    # times that long before the next: here two periods.
    sweep._probed(None, False, 2 * FRONT_SWEEP_SECONDS * PROBE_SHARE)
    looked: list[float] = []

    def look(after: float) -> float | None:
        looked.append(after)
        return None

    sweep.probe(T + 2 * FRONT_SWEEP_SECONDS, look)
    sweep.settle()
    assert looked == []
    sweep.probe(T + 3 * FRONT_SWEEP_SECONDS + 1, look)
    sweep.settle()
    assert len(looked) == 1


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
    for _ in range(int(FRONT_SWEEP_SECONDS) + 2):
        clock.advance(1.0)
        recovered += q.backend.rescue(clock()).recovered
        q.backend.lease_sweep.settle()  # type: ignore[attr-defined]
    assert recovered == [job_id]


def test_the_probe_finds_the_first_expired_lease_behind_a_position(
    clocked_queue: errands.Queue, clock: FixedClock
) -> None:
    """``expired_lease_behind``, the probe's query, on both dialects."""
    q = clocked_queue
    first, second = q.enqueue("t", {}), q.enqueue("t", {})
    t = clock()
    q.backend.claim(ClaimRequest("w", ["t"], None, 1, 10.0), t)  # lease t + 10
    q.backend.claim(ClaimRequest("w", ["t"], None, 1, 20.0), t)  # lease t + 20
    backend: Any = q.backend
    assert backend.expired_lease_behind(t + 100, t + 100) == t + 10
    assert backend.expired_lease_behind(t + 10, t + 100) is None  # none before the position
    assert backend.expired_lease_behind(t + 100, t + 15) == t + 10  # only expired leases
    assert backend.expired_lease_behind(t + 100, t + 5) is None
    assert first and second
