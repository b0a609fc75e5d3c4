"""Where a claim resumes its scan of the due jobs: past the dead index entries of the jobs
already claimed.

On PostgreSQL a claimed job's entry stays in the partial index of due jobs until VACUUM
removes it, and VACUUM cannot while any transaction still sees the row (a long report,
``pg_dump``, a replica's feedback). A claim that scans from the front of the index then
reads every such entry, and its heap row, before the first live job: its cost grows with
the jobs claimed since the horizon was held. So each claimer (its types and queues) remembers
the priority, run_at and id of the last job it claimed and the next claim starts there
(own.sql ``claim_recorded``: higher priorities from the front, that priority from the remembered
run_at and id, lower priorities from their own front).

The position is a hint, never a promise that nothing is behind it:

- it stays SLACK seconds behind the claim's clock, so a job committed late by a slow
  producer (its run_at is when it was enqueued, not when it became visible) is not passed;
- a job can still come to be due behind it (run_at given in the past, another host's clock
  running behind, a paused queue resumed, a claim that skipped a locked job rolled back): so
  every FRONT_SCAN_SECONDS a probe looks behind the position (jobs.sql ``claim_behind``, the
  first due job there) and moves the position back to what it found; nothing waits behind a
  position much longer than that. A claim that finds nothing keeps the position: an idle
  worker woken for one job must not pay for every dead entry to find it.

The probe reads what a claim from the front would (every dead entry before the position), so
it runs on a thread and connection of its own, never in the claim: the worker's control loop
does not wait for it. And the next probe waits at least PROBE_SHARE⁻¹ times as long as the
last one took, so however many dead entries a held snapshot keeps, probing takes at most
that share of one connection's time; the wait for a job behind the position then grows with
the hold, the claims do not. The cost left in the claim is the dead entries within SLACK of
the clock, which does not grow while the horizon is held.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from .host import SQLHost

log = logging.getLogger("errands.worker")

SLACK = 0.25  # seconds behind the claim's clock: commits slower than this meet a probe
FRONT_SCAN_SECONDS = 5.0  # at least this long between probes behind a position
PROBE_SHARE = 0.05  # and at least 1 / PROBE_SHARE times as long as the last probe took
FRONT = 1 << 31  # a priority above any integer priority: the claim scans from the front
NO_RUN_AT = 0.0
FROM_THE_FRONT = {"after_priority": FRONT, "after_run_at": NO_RUN_AT, "after_id": 0}
BEFORE = 0.001  # seconds: a position moved back to a job found behind it starts this far before


# A claimer's types or queues as the claim binds them: a JSON text (SQLite) or a list (psycopg).
Bound = str | Sequence[str]
Key = tuple[str | tuple[str, ...], str | tuple[str, ...] | None]
# What a probe found behind a position: the first due job's run_at and id, or None.
Found = tuple[float, int] | None


def _key(types: Bound, queues: Bound | None) -> Key:
    def frozen(v: Bound) -> str | tuple[str, ...]:
        return v if isinstance(v, str) else tuple(v)

    return frozen(types), None if queues is None else frozen(queues)


def _bound(at: tuple[int, float, int]) -> dict[str, Any]:
    return {"after_priority": at[0], "after_run_at": at[1], "after_id": at[2]}


class ClaimPosition:
    """Per claimer (types, queues): the priority, run_at and id its next claim resumes past,
    and when a probe last looked behind it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._at: dict[Key, tuple[int, float, int]] = {}
        self._probed_at: dict[Key, float] = {}
        self._period: dict[Key, float] = {}
        self._probes: dict[Key, threading.Thread] = {}
        # Claimers whose position a probe moved back after their claim running now started:
        # that claim's end must not move it forward past what the probe found.
        self._rewound: set[Key] = set()

    def params(self, types: Bound, queues: Bound | None, now: float) -> dict[str, Any]:
        """The claim's ``after_priority``, ``after_run_at`` and ``after_id``: FRONT when there is
        no position or the clock stepped back past the last probe."""
        key = _key(types, queues)
        with self._lock:
            self._rewound.discard(key)
            at = self._at.get(key)
            # A clock stepped back scans from the front at once: jobs enqueued since are due
            # before the position, and a probe period counted on that clock would not end
            # for as long as the step.
            if at is None or now < self._probed_at.get(key, now):
                self._at.pop(key, None)
                self._probed_at[key] = now
                return dict(FROM_THE_FRONT)
        return _bound(at)

    def probe(
        self,
        types: Bound,
        queues: Bound | None,
        now: float,
        look: Callable[[dict[str, Any]], Found],
    ) -> None:
        """Start a probe behind this claimer's position on a thread of its own, when its
        period has passed and none runs: ``look`` gets the position's parameters and returns
        the first due job behind it; the position moves back to that job."""
        key = _key(types, queues)
        with self._lock:
            at, running = self._at.get(key), self._probes.get(key)
            # (A thread not alive: this is a process forked while its parent probed.)
            if at is None or (running is not None and running.is_alive()):
                return
            if now - self._probed_at.get(key, now) < self._period.get(key, FRONT_SCAN_SECONDS):
                return
            self._probed_at[key] = now
            thread = threading.Thread(
                target=self._run, args=(key, at, look), name="errands-claim-probe", daemon=True
            )
            self._probes[key] = thread
        thread.start()

    def _run(
        self, key: Key, at: tuple[int, float, int], look: Callable[[dict[str, Any]], Found]
    ) -> None:
        began = time.monotonic()
        found: Found = None
        failed = False
        try:
            found = look(_bound(at))
        except Exception as exc:  # no promise left: the next claim scans from the front
            failed = True
            log.warning("probe behind the claim's position failed (%s): next from the front", exc)
        self._probed(key, at[0], found, failed, time.monotonic() - began)

    def _probed(self, key: Key, priority: int, found: Found, failed: bool, took: float) -> None:
        with self._lock:
            self._probes.pop(key, None)
            self._period[key] = max(FRONT_SCAN_SECONDS, took / PROBE_SHARE)
            at = self._at.get(key)
            if failed:
                self._at.pop(key, None)
                self._rewound.add(key)
            elif at is not None and found is not None and at[0] == priority:
                # Higher and lower priorities are scanned from their front by every claim;
                # at the position's priority, resume just before what the probe found.
                self._at[key] = min(at, (priority, found[0] - BEFORE, 0))
                self._rewound.add(key)

    def settle(self, timeout: float | None = None) -> None:
        """Wait for the probes running now (tests, and a backend closing)."""
        with self._lock:
            probes = list(self._probes.values())
        for thread in probes:
            thread.join(timeout)

    def claimed(
        self,
        types: Bound,
        queues: Bound | None,
        now: float,
        found: Sequence[tuple[int, float, int]],
    ) -> None:
        """Move past what a claim found (priority, run_at, id of each job)."""
        if not found:
            return
        key = _key(types, queues)
        with self._lock:
            if key in self._rewound:
                return
            priority = min(f[0] for f in found)  # the last in claim order: lowest priority,
            _, run_at, job_id = max(f for f in found if f[0] == priority)  # then run_at, id
            if run_at > now - SLACK:  # not yet SLACK behind: everything from there on
                run_at, job_id = now - SLACK, 0
            self._at[key] = (priority, run_at, job_id)

    def forget(self) -> None:
        """Every claimer scans from the front next time (this process queued work that may
        lie behind a position)."""
        with self._lock:
            self._at.clear()


class ClaimScans(SQLHost):
    """Where the worker's scans of queued jobs start: the claim's position, and next_due."""

    # The claim resumes its index scan where this claimer last found work: PostgreSQL, whose
    # index keeps claimed jobs' entries until VACUUM. SQLite removes an entry with its row's
    # change, so its claim scans from the front and ignores the position.
    claim_resumes = False

    @property
    def claim_position(self) -> ClaimPosition:
        """Where each claimer of this process resumes its scan (made on first use)."""
        position: ClaimPosition = self.__dict__.setdefault("_claim_position", ClaimPosition())
        return position

    def _claim_start(
        self, types: Bound, queues: Bound | None, now: float, from_front: bool = False
    ) -> dict[str, Any]:
        if not self.claim_resumes or from_front:
            return FROM_THE_FRONT
        start = self.claim_position.params(types, queues, now)
        if start != FROM_THE_FRONT:
            bound = {"types": types, "queues": queues, "now": now}
            self.claim_position.probe(
                types, queues, now, lambda at: self.claim_behind({**bound, **at})
            )
        return start

    def claim_behind(self, params: dict[str, Any]) -> Found:
        """The first job a claim with these parameters would take at the position's priority,
        from the front up to the position (run_at, id), or None (jobs.sql ``claim_behind``)."""
        rows = self._fetch("claim_behind", params)
        if not rows:
            return None
        return self._epoch(rows[0]["run_at"]) or 0.0, int(rows[0]["id"])

    def next_due(
        self, types: Sequence[str], queues: Sequence[str] | None, after: float = 0.0
    ) -> float | None:
        """When the first queued job of these types and queues falls due, of those due after
        ``after`` (a worker passes its now: the jobs due already it claims, and the index scan
        then starts past the entries of jobs claimed before now, which PostgreSQL keeps until
        VACUUM and a held snapshot keeps longer)."""
        if not types:
            return None
        params = {
            "types": self._list(list(types)),
            "queues": None if queues is None else self._list(list(queues)),
            "after": after,
        }
        rows = self._fetch("next_due", params)
        return None if not rows else self._epoch(rows[0]["next_run_at"])
