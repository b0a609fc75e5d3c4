"""Retention as a maintenance service.

``Pruner(q).run_once(now)`` deletes finished jobs older than ``Settings.retention`` (per
state: succeeded 30 d, failed 90 d, cancelled 30 d by default), ``batch_size`` rows per
transaction, rolling each batch into ``job_stats_hourly`` in that same transaction (so a rerun
after an interruption or crash never counts a row twice), attempts/events/blobs going by
cascade, and checkpoints the SQLite WAL after a large run. Run it from one elected leader every
few minutes; it is also safe (just wasteful) from several.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from .backends.base import PruneProgress, PruneReport

if TYPE_CHECKING:
    from .queue import Queue


class Pruner:
    """Maintenance service: delete finished jobs past their retention, rolled up first."""

    name = "prune"
    interval = 300.0  # retention is in days: every few minutes keeps batches small

    def __init__(
        self,
        q: Queue,
        *,
        batch_size: int = 1000,
        progress: Callable[[PruneProgress], None] | None = None,
        stop: threading.Event | None = None,
    ) -> None:
        self.q = q
        self.batch_size = batch_size
        self.progress = progress
        self.stop = stop or threading.Event()  # set it to interrupt between batches

    def run_once(self, now: float | None = None) -> PruneReport:
        return self.q.prune(
            now,
            batch_size=self.batch_size,
            progress=self.progress,
            should_stop=self.stop.is_set,
        )
