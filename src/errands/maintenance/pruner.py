"""Retention as a maintenance service.

``Pruner(backend, retention).run_once(now)`` deletes finished jobs older than their state's
retention (``Settings.retention``: succeeded 30 d, failed 90 d, cancelled 30 d by default),
and the operator activity log's rows older than ``activity`` (365 d by default).
The Pruner owns the loop; the backend offers two verbs and a hook:

- ``prune_batch(state, cutoff, limit, now=)`` deletes up to ``limit`` rows, oldest first, and rolls
  them into ``job_stats_hourly`` in that same transaction (so a rerun after an interruption or
  crash never counts a row twice); attempts, events and blobs go by cascade;
- ``prune_count(state, cutoff, now=)`` counts for a dry run;
- ``checkpoint()`` truncates SQLite's WAL (a no-op on PostgreSQL).

Here it decides batching (``batch_size`` rows per transaction, so the write lock is held
briefly), pacing (at most ``max_batches`` per pass; while work is left, ``interval`` drops to
``BUSY_INTERVAL`` so the elected worker comes back soon but claims jobs in between),
interruption (``should_stop`` is checked before each batch) and checkpoints (after every
``checkpoint_after`` rows deleted, counted across passes). Run it from one elected leader every
few minutes; it is also safe (just wasteful) from several.

A prune an operator asks for (``Queue.prune``) is logged in the activity log: given ``row``,
each batch that deletes jobs, and each batch of old activity rows, writes the prune's row in
its own transaction, as a bulk action's chunks do (``Audit``): no deletion commits without it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Protocol

from ..backends.activity import ActivityVerbs
from ..backends.base import Audit, PruneProgress, PruneReport
from ..backends.verbs import RetentionVerbs
from ..core.records import ActivityEntry
from ..core.settings import Retention
from ..core.states import State

CHECKPOINT_AFTER = 10_000  # rows deleted before the SQLite WAL is checkpointed
IDLE_INTERVAL = 300.0  # retention is in days: every few minutes keeps batches small
BUSY_INTERVAL = 1.0  # a pass stopped at max_batches: the next one soon, claims in between
# The elected worker runs its services in its control loop: a pass of at most this many
# batches (10 000 rows by default) keeps a large backlog from stalling claims for long.
SERVICE_MAX_BATCHES = 10


class PruneVerbs(RetentionVerbs, ActivityVerbs, Protocol):
    """What the Pruner deletes through: finished jobs and old activity log rows."""


class Pruner:
    """Maintenance service: delete finished jobs past their retention, rolled up first."""

    name = "prune"

    def __init__(
        self,
        backend: PruneVerbs,
        retention: Retention,
        *,
        batch_size: int = 1000,
        max_batches: int | None = None,
        progress: Callable[[PruneProgress], None] | None = None,
        should_stop: Callable[[], bool] | None = None,
        checkpoint_after: int = CHECKPOINT_AFTER,
        row: Callable[[PruneReport], ActivityEntry] | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if max_batches is not None and max_batches < 1:
            raise ValueError(f"max_batches must be >= 1 or None, got {max_batches}")
        self.backend = backend
        self.retention = retention
        self.batch_size = batch_size
        self.max_batches = max_batches  # None: each pass runs until nothing is due
        self.progress = progress
        self.should_stop = should_stop
        self.checkpoint_after = checkpoint_after
        self.row = row  # the activity row of an operator's prune; None: the service's, unlogged
        self.uncheckpointed = 0  # rows deleted since the last checkpoint, across passes
        self.behind = False  # the last pass left rows behind (max_batches or interrupted)

    @property
    def interval(self) -> float:
        """Seconds until the next pass, read by Maintenance after each one."""
        return BUSY_INTERVAL if self.behind else IDLE_INTERVAL

    def cutoffs(self, now: float) -> list[tuple[str, float]]:
        """Each terminal state with the finish time before which its jobs go."""
        ret = self.retention
        return [
            (State.SUCCEEDED.value, now - ret.succeeded),
            (State.FAILED.value, now - ret.failed),
            (State.CANCELLED.value, now - ret.cancelled),
        ]

    def run_once(self, now: float, *, dry_run: bool = False) -> PruneReport:
        report = PruneReport(dry_run=dry_run)
        if dry_run:
            for state, cutoff in self.cutoffs(now):
                report.deleted[state] = self.backend.prune_count(state, cutoff, now=now)
            return report
        log = None if self.row is None else _Log(self.row, report, self.batch_size)
        for state, cutoff in self.cutoffs(now):
            report.deleted[state] = 0
            if not self._drain(state, cutoff, now, report, log):
                break
        self.behind = report.interrupted or report.more
        if not self.behind:
            # A whole pass: drop minute figures past their keep and fold counter shards, and
            # the operator activity log's rows past their own retention.
            self.backend.tidy_figures(now)
            self._drain_activity(now - self.retention.activity, report, log)
        if log is not None and log.audit.row_id is None:
            # Stopped before any transaction deleted (and wrote the row): one that changes
            # nothing else, so the row alone says the prune was tried.
            self.backend.record_activity(log.row(report))
        self.uncheckpointed += report.total
        if self.uncheckpointed >= self.checkpoint_after:
            self.backend.checkpoint()
            self.uncheckpointed = 0
            report.checkpointed = True
        return report

    def _drain_activity(self, cutoff: float, report: PruneReport, log: _Log | None) -> None:
        """The activity log's rows older than ``cutoff``, ``batch_size`` per transaction."""
        while True:
            audit = None if log is None else log.counting(None)
            n = self.backend.prune_activity(cutoff, self.batch_size, audit=audit)
            report.activity += n
            if n < self.batch_size:
                return

    def _drain(
        self, state: str, cutoff: float, now: float, report: PruneReport, log: _Log | None
    ) -> bool:
        """Batches of one state until none is full; False if the pass must stop here."""
        while True:
            if self.should_stop is not None and self.should_stop():
                report.interrupted = True
                return False
            if self.max_batches is not None and report.batches >= self.max_batches:
                report.more = True
                return False
            audit = None if log is None else log.counting(state)
            n = self.backend.prune_batch(state, cutoff, self.batch_size, now=now, audit=audit)
            if n == 0:
                return True
            report.batches += 1
            report.deleted[state] += n
            if self.progress is not None:
                self.progress(
                    PruneProgress(state, report.deleted[state], report.total, report.batches)
                )
            if n < self.batch_size:
                return True


class _Log:
    """One operator's prune's activity row (``Pruner(row=…)``): one ``Audit`` that every
    transaction deleting rows writes, given how many it deleted, with the report as it stands
    once that transaction commits. Until the pass's last transaction the row says
    ``interrupted``: a pass cut short — by ``should_stop``, ``max_batches`` or a crash — is
    left with a row that counts exactly the deletions committed and says it did not finish."""

    def __init__(
        self, row: Callable[[PruneReport], ActivityEntry], report: PruneReport, batch_size: int
    ) -> None:
        self.row, self.report, self.batch_size = row, report, batch_size
        self.audit = Audit(self._entry)
        self.state: str | None = None  # what the next transaction deletes; None: activity rows

    def counting(self, state: str | None) -> Audit:
        self.state = state
        return self.audit

    def _entry(self, n: int) -> ActivityEntry:
        so_far = replace(self.report, deleted=dict(self.report.deleted), interrupted=True)
        if self.state is not None:
            so_far.deleted[self.state] += n
        else:
            so_far.activity += n
            # The activity log's last batch (not full) ends a whole pass: the prune is done.
            so_far.interrupted = n >= self.batch_size
        return self.row(so_far)
