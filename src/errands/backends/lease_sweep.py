"""Where the rescuer's sweep for expired leases starts: past the dead index entries of the jobs
that finished since its last sweep.

On PostgreSQL a finished job's entry stays in the partial index of running jobs
(``jobs_running``, ordered by ``lease_expires_at``) until VACUUM removes it, and VACUUM cannot
while any transaction still sees the row (a long report, ``pg_dump``, a replica's feedback).
A sweep that starts at the front of the index then reads every such entry whose lease has
passed, and its heap row, to find the few live ones: its cost grows with every job finished
since the horizon was held. A sweep that found everything expired before its clock (fewer rows
than its limit) has recovered every lease that had expired by then, so the next sweep starts
there (jobs.sql ``expired_leases``: ``lease_expires_at >= :after``).

The position is a hint, never a promise that nothing is behind it:

- it stays SLACK seconds behind the sweep's clock, so a lease written by a transaction that
  committed just after the sweep read (its expiry computed from a clock a little earlier) is
  not passed;
- a sweep that skipped a row another transaction held locked (its holder may roll back and
  leave the lease expired) does not move the position;
- a lease can still lie behind it (a host whose clock runs far behind): so every
  FRONT_SWEEP_SECONDS a sweep starts at the front again, and such a job waits at most that
  much longer than its lease.

The cost left is the entries within SLACK of the clock, which does not grow while the horizon
is held, and one full sweep per FRONT_SWEEP_SECONDS.
"""

from __future__ import annotations

import threading

SLACK = 2.0  # seconds behind the sweep's clock: lease writes committed later meet a front sweep
FRONT_SWEEP_SECONDS = 30.0  # at most this long between sweeps from the front
FROM_THE_FRONT = 0.0  # the epoch: every lease


class LeaseSweep:
    """The ``lease_expires_at`` the next sweep of this process starts from."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._after: float | None = None
        self._front_at: float | None = None

    def start(self, now: float) -> float:
        """The sweep's ``after``: FROM_THE_FRONT when there is no position, when the last front
        sweep is FRONT_SWEEP_SECONDS old, or when the clock went back past the position."""
        with self._lock:
            after, front_at = self._after, self._front_at
            if (
                after is None
                or front_at is None
                or not front_at <= now < front_at + FRONT_SWEEP_SECONDS
                or now < after
            ):
                self._after, self._front_at = None, now
                return FROM_THE_FRONT
            return after

    def swept(self, now: float, found: int, limit: int, *, skipped: bool = False) -> None:
        """Move to SLACK before ``now`` when the sweep found fewer than its limit (it saw every
        lease expired by then); a full sweep, or one that skipped a row another transaction
        had locked, leaves the position where it was."""
        if found >= limit or skipped:
            return
        with self._lock:
            self._after = max(self._after or FROM_THE_FRONT, now - SLACK)
