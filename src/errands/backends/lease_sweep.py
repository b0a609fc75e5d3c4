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
  FRONT_SWEEP_SECONDS a probe on a thread of its own looks behind the position (jobs.sql
  ``expired_leases_behind``, the first expired lease there) and moves the position back to
  it; such a job waits at most about that much longer than its lease.

The probe reads the dead entries a sweep from the front would, so the rescuer's sweep (on the
worker's control loop) never does, and the next probe waits at least PROBE_SHARE⁻¹ times as
long as the last one took: probing takes at most that share of one connection's time however
many dead entries a held snapshot keeps. The cost left in the sweep is the entries within
SLACK of the clock, which does not grow while the horizon is held.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from .claim_position import BEFORE, PROBE_SHARE

log = logging.getLogger("errands.worker")

SLACK = 2.0  # seconds behind the sweep's clock: lease writes committed later meet a probe
FRONT_SWEEP_SECONDS = 30.0  # at least this long between probes behind the position
FROM_THE_FRONT = 0.0  # the epoch: every lease


class LeaseSweep:
    """The ``lease_expires_at`` the next sweep of this process starts from."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._after: float | None = None
        self._probed_at: float | None = None
        self._period = FRONT_SWEEP_SECONDS
        self._probe: threading.Thread | None = None
        # A probe moved the position back after the sweep running now started: that sweep's
        # end must not move it forward past what the probe found.
        self._rewound = False

    def start(self, now: float) -> float:
        """The sweep's ``after``: FROM_THE_FRONT when there is no position, or when the clock
        went back past the position or the last probe."""
        with self._lock:
            self._rewound = False
            after, probed_at = self._after, self._probed_at
            if after is None or probed_at is None or now < probed_at or now < after:
                self._after, self._probed_at = None, now
                return FROM_THE_FRONT
            return after

    def probe(self, now: float, look: Callable[[float], float | None]) -> None:
        """Start a probe behind the position on a thread of its own, when its period has
        passed and none runs: ``look`` gets the position and returns the first expired lease
        behind it (or None); the position moves back to that lease."""
        with self._lock:
            after, probed_at, running = self._after, self._probed_at, self._probe
            # (A thread not alive: this is a process forked while its parent probed.)
            if after is None or probed_at is None or (running is not None and running.is_alive()):
                return
            if now - probed_at < self._period:
                return
            self._probed_at = now
            self._probe = threading.Thread(
                target=self._run, args=(after, look), name="errands-sweep-probe", daemon=True
            )
            thread = self._probe
        thread.start()

    def _run(self, after: float, look: Callable[[float], float | None]) -> None:
        began = time.monotonic()
        found: float | None = None
        failed = False
        try:
            found = look(after)
        except Exception as exc:  # no promise left: the next sweep starts at the front
            failed = True
            log.warning("probe behind the rescuer's sweep failed (%s): next from the front", exc)
        self._probed(found, failed, time.monotonic() - began)

    def _probed(self, found: float | None, failed: bool, took: float) -> None:
        with self._lock:
            self._probe = None
            self._period = max(FRONT_SWEEP_SECONDS, took / PROBE_SHARE)
            if failed:
                self._after = None
                self._rewound = True
            elif found is not None and self._after is not None:
                self._after = min(self._after, found - BEFORE)
                self._rewound = True

    def settle(self, timeout: float | None = None) -> None:
        """Wait for the probe running now (tests, and a backend closing)."""
        with self._lock:
            thread = self._probe
        if thread is not None:
            thread.join(timeout)

    def swept(self, now: float, found: int, limit: int, *, skipped: bool = False) -> None:
        """Move to SLACK before ``now`` when the sweep found fewer than its limit (it saw every
        lease expired by then); a full sweep, one that skipped a row another transaction had
        locked, or one a probe found a lease behind while it ran, leaves the position."""
        if found >= limit or skipped:
            return
        with self._lock:
            if not self._rewound:
                self._after = max(self._after or FROM_THE_FRONT, now - SLACK)
