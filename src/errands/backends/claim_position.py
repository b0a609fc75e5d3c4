"""Where a claim resumes its scan of the due jobs: past the dead index entries of the jobs
already claimed.

On PostgreSQL a claimed job's entry stays in the partial index of due jobs until VACUUM
removes it, and VACUUM cannot while any transaction still sees the row (a long report,
``pg_dump``, a replica's feedback). A claim that scans from the front of the index then
reads every such entry, and its heap row, before the first live job: its cost grows with
the jobs claimed since the horizon was held. So each claimer (its types and queues) remembers
the priority, run_at and id of the last job it claimed and the next claim starts there
(jobs.sql ``claim``: higher priorities from the front, that priority from the remembered
run_at and id, lower priorities from their own front).

The position is a hint, never a promise that nothing is behind it:

- it stays SLACK seconds behind the claim's clock, so a job committed late by a slow
  producer (its run_at is when it was enqueued, not when it became visible) is not passed;
- a job can still come to be due behind it (run_at given in the past, another host's clock
  running behind, a paused queue resumed, a claim that skipped a locked job rolled back): so
  every FRONT_SCAN_SECONDS a claim scans from the front again, and nothing waits behind a
  position longer than that. A claim that finds nothing keeps the position: an idle worker
  woken for one job must not pay for every dead entry to find it.

The cost left is the dead entries within SLACK of the clock, which does not grow while the
horizon is held, and one full scan per FRONT_SCAN_SECONDS.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from .host import SQLHost

SLACK = 0.25  # seconds behind the claim's clock: commits slower than this meet a front scan
FRONT_SCAN_SECONDS = 5.0  # at most this long between claims scanning from the front
FRONT = 1 << 31  # a priority above any integer priority: the claim scans from the front
NO_RUN_AT = 0.0
FROM_THE_FRONT = {"after_priority": FRONT, "after_run_at": NO_RUN_AT, "after_id": 0}


# A claimer's types or queues as the claim binds them: a JSON text (SQLite) or a list (psycopg).
Bound = str | Sequence[str]
Key = tuple[str | tuple[str, ...], str | tuple[str, ...] | None]


def _key(types: Bound, queues: Bound | None) -> Key:
    def frozen(v: Bound) -> str | tuple[str, ...]:
        return v if isinstance(v, str) else tuple(v)

    return frozen(types), None if queues is None else frozen(queues)


class ClaimPosition:
    """Per claimer (types, queues): the priority, run_at and id its next claim resumes past."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._at: dict[Key, tuple[int, float, int]] = {}
        self._front_at: dict[Key, float] = {}

    def params(self, types: Bound, queues: Bound | None, now: float) -> dict[str, Any]:
        """The claim's ``after_priority``, ``after_run_at`` and ``after_id``: FRONT when there is no
        position or the last front scan is FRONT_SCAN_SECONDS old."""
        key = _key(types, queues)
        with self._lock:
            at = self._at.get(key)
            since = now - self._front_at.get(key, now)
            # A clock stepped back (since < 0) scans from the front at once: jobs enqueued
            # since are due before the position, and the period would not end for as long
            # as the step.
            if at is None or not 0 <= since < FRONT_SCAN_SECONDS:
                self._at.pop(key, None)
                self._front_at[key] = now
                return dict(FROM_THE_FRONT)
        return {"after_priority": at[0], "after_run_at": at[1], "after_id": at[2]}

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
        return self.claim_position.params(types, queues, now)

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
