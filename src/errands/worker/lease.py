"""What a handler's ``ctx`` reaches of its worker (``context.Lease``): its own attempt's
lease — cancel requested, ``heartbeat()``, ``complete(connection=…)``, ``progress()``,
``upstream()`` — called from the handler's thread, never the control loop's."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

from ..backends import forks
from ..backends.base import ClaimedJob, Failed, Succeeded
from ..backends.verbs import Backend
from ..core.records import Job
from ..core.settings import Settings
from ..errors import DatabaseError, InvalidTransitionError, JobError
from . import execution
from .db import WorkerDatabase
from .durable import Journal
from .executor import Slot

log = logging.getLogger("errands.worker")

PROGRESS_INTERVAL = 1.0  # ctx.progress(): at most one write a second per job


class JobLease:
    """What ``ctx`` sees of the worker (``context.Lease``): its own attempt's lease."""

    __slots__ = ("_journal", "_slot", "_worker")

    def __init__(self, worker: HandlerLeases, slot: Slot) -> None:
        self._worker, self._slot = worker, slot
        self._journal: Journal | None = None

    def journal(self, *, is_async: bool | None = None) -> Journal:
        """This run's durable calls (worker/durable.py), made on the first one."""
        slot, worker = self._slot, self._worker
        if forks.generation != worker.generation:
            raise InvalidTransitionError(
                f"job {slot.job.id} is held by the worker process that forked this one; "
                "make its durable calls there, not in the child"
            )
        if is_async is not None and is_async != slot.task.is_async:
            raise InvalidTransitionError(
                "an async handler records steps with `await ctx.step_async(…)`"
                if slot.task.is_async
                else "ctx.step_async is for async handlers; a sync handler calls ctx.step(…)"
            )
        if self._journal is None:
            self._journal = Journal(
                worker.backend,
                worker.db,
                slot.job,
                lambda: slot.started_at,
                worker.clock,
                worker.settings.max_payload_bytes,
            )
        return self._journal

    @property
    def cancel_requested(self) -> bool:
        return self._slot.cancel_requested

    def heartbeat(self) -> bool:
        if forks.generation != self._worker.generation:
            return False  # a forked child holds no lease: it must not renew the parent's
        return self._worker._beat_one(self._slot.job)

    def complete(self, connection: Any, result: Any) -> None:
        if forks.generation != self._worker.generation:
            raise InvalidTransitionError(
                f"job {self._slot.job.id} is held by the worker process that forked this one; "
                "complete it there, not in the child"
            )
        self._worker._complete_in(self._slot, connection, result)

    def progress(self, fraction: float, message: str | None) -> None:
        self._worker._progress(self._slot, fraction, message)

    def upstream(self) -> list[Job]:
        return [job for job, _ in self._worker.backend.upstream(self._slot.job.id)]


class HandlerLeases:
    """The Worker's side of its handlers' leases (a mixin: the Worker defines what is
    declared here)."""

    id: str
    backend: Backend
    settings: Settings
    clock: Callable[[], float]
    db: WorkerDatabase
    generation: int
    _mono: Callable[[], float]
    _last_renewal: float
    _progress_lock: threading.Lock
    _held: dict[int, Slot]

    def _lose(self, job_id: int) -> None: ...

    def _beat_one(self, job: ClaimedJob) -> bool:
        """ctx.heartbeat(): extend one lease now, from the handler's thread. A database too
        busy to answer is not a lost lease: the handler hears False only once the lease has
        really run out by our own reckoning."""
        now = self.clock()
        lease = self.settings.lease_seconds
        try:
            (ok,) = self.db.call(
                self.backend.heartbeat, self.id, [(job.id, job.attempt)], lease, now
            )
        except DatabaseError as exc:
            log.warning("ctx.heartbeat() for job %d failed: %s", job.id, exc)
            return self._mono() - self._last_renewal < lease
        if not ok:
            self._lose(job.id)
        return ok

    def _progress(self, slot: Slot, fraction: float, message: str | None) -> None:
        """ctx.progress(): written now from the handler's thread if this slot wrote none in
        the last PROGRESS_INTERVAL, else kept for the next heartbeat (the latest wins)."""
        mono = self._mono()
        with self._progress_lock:
            if mono - slot.progress_written < PROGRESS_INTERVAL:
                slot.progress = (fraction, message)
                return
            slot.progress, slot.progress_written = None, mono
        self._write_progress(slot, fraction, message)

    def _write_progress(self, slot: Slot, fraction: float, message: str | None) -> None:
        job = slot.job
        args = (self.id, job.id, job.attempt, fraction, message, self.clock())
        try:
            self.db.call(self.backend.record_progress, *args)
        except DatabaseError as exc:  # progress is advisory: never fail the job for it
            log.warning("ctx.progress() for job %d not stored: %s", job.id, exc)
        except Exception as exc:  # nor the worker: this runs in its loop, at each heartbeat
            log.warning("ctx.progress() for job %d not stored: %r", job.id, exc)

    def _flush_progress(self, slots: Iterable[Slot]) -> None:
        """The latest progress each of ``slots`` reported since its last write: at each
        heartbeat, and before a batch's outcomes (the fence needs the attempt running)."""
        pending = []
        with self._progress_lock:
            for slot in slots:
                if slot.progress is not None:
                    pending.append((slot, *slot.progress))
                    slot.progress, slot.progress_written = None, self._mono()
        for slot, fraction, message in pending:
            self._write_progress(slot, fraction, message)

    def _complete_in(self, slot: Slot, connection: Any, result: Any) -> None:
        """ctx.complete(): the success, written in the application's own transaction."""
        job = slot.job
        if self._held.get(job.id) is not slot:
            raise InvalidTransitionError(f"job {job.id} is not held by this worker")
        outcome = execution.succeeded(job, slot.started_at, result, self.settings.max_result_bytes)
        if isinstance(outcome, Failed):
            raise JobError(outcome.error_code, outcome.error_detail, retry=False)
        assert isinstance(outcome, Succeeded)
        if not self.db.call(self.backend.complete_in, connection, outcome, self.id, self.clock()):
            raise InvalidTransitionError(
                f"job {job.id} attempt {job.attempt} no longer holds the job (its lease "
                "was recovered); roll back your transaction"
            )
