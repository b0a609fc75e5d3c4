"""The worker: claims batches, runs handlers, records outcomes in batches.

One control thread owns every database write of the worker (claims, outcomes, heartbeats,
rescue), so writes are naturally grouped: while one transaction commits, the next handlers'
outcomes pile up and go in the next. Sync handlers run on ``concurrency`` runner threads;
``async def`` handlers on one event loop thread, at most ``concurrency`` at a time.

Two clocks: the Queue's ``clock`` (wall time) only for what is stored in or compared by the
database; ``time.monotonic`` for every local deadline (heartbeats, timeouts, polling,
maintenance, cancel checks), so a wall-clock step never stalls or rushes them.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import queue as stdqueue
import signal
import socket
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import TYPE_CHECKING, Any

from . import execution, worker_log
from .backends.base import (
    ClaimedJob,
    ClaimRequest,
    Failed,
    Outcome,
    Released,
    Succeeded,
    WorkerInfo,
)
from .context import JobContext
from .errors import (
    ConfigurationError,
    DatabaseBusyError,
    DatabaseError,
    DatabaseReplacedError,
    InvalidTransitionError,
    JobError,
)
from .maintenance import Maintenance
from .tasks import Task

if TYPE_CHECKING:
    from .queue import Queue

log = logging.getLogger("errands.worker")

# Slot states. buffered → started → done; buffered → released (shutdown) or lost (lease gone);
# started → abandoned (sync handler past its timeout: its late result is dropped).
BUFFERED, STARTED, DONE, RELEASED, LOST, ABANDONED = range(6)

# Prefetch aims to hold as many jobs as the runners will start within this horizon, so tiny
# jobs are claimed in large batches and slow ones are not hoarded away from other workers.
PREFETCH_HORIZON = 0.02
CANCEL_CHECK_INTERVAL = 1.0
# An async handler still running this long past its timeout is blocking the event loop (the
# loop would have cancelled it at its deadline): it is failed and the loop replaced.
ASYNC_WEDGE_GRACE = 1.0


@dataclass(slots=True)
class _Slot:
    job: ClaimedJob
    task: Task[Any, Any]
    ctx: JobContext | None = None
    state: int = BUFFERED
    started_at: float = 0.0  # wall clock: stored as the attempt's start
    begun: float = 0.0  # monotonic: run time and deadline
    deadline: float | None = None  # monotonic
    cancel_requested: bool = False
    async_task: asyncio.Task[Any] | None = None
    hooks: Any = None  # execute middleware resumed when the attempt ends (errands.middleware)
    timed_out: Outcome | None = None  # what was recorded for an abandoned attempt


@dataclass(slots=True)
class WorkerSummary:
    """What one ``run_worker`` call did."""

    worker_id: str
    claimed: int = 0
    succeeded: int = 0
    failed: int = 0
    retried: int = 0
    cancelled: int = 0
    released: int = 0
    refused: int = 0  # outcomes the fence refused: the lease had been recovered
    rescued: int = 0
    db_errors: int = 0  # busy timeouts and other database errors survived
    recycled: bool = False  # stopped to be replaced: a sync handler overran its timeout
    interrupted: bool = False
    outcomes: dict[str, int] = field(default_factory=dict)

    @property
    def processed(self) -> int:
        return self.succeeded + self.failed + self.retried + self.cancelled


def make_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Worker:
    def __init__(
        self,
        queue: Queue,
        *,
        concurrency: int = 8,
        queues: Sequence[str] | None = None,
        burst: bool = False,
        handle_signals: bool = True,
        max_prefetch: int = 200,
        worker_id: str | None = None,
        recycle_on_timeout: bool = False,
        supervised: bool = False,
    ) -> None:
        if concurrency < 1:
            raise ConfigurationError(f"concurrency must be >= 1, got {concurrency}")
        if not queue.tasks:
            raise ConfigurationError(
                "this Queue has no tasks registered, so a worker would never claim anything; "
                "register handlers with @q.task before run_worker"
            )
        if isinstance(queues, str):
            queues = [q for q in queues.split(",") if q]
        self.q = queue
        self.backend = queue.backend
        self.settings = queue.settings
        self.clock = queue.clock
        self.concurrency = concurrency
        self.queues = None if queues is None else list(queues)
        self.types = sorted(queue.tasks)
        self.burst = burst
        self.handle_signals = handle_signals
        self.max_prefetch = max_prefetch
        self.recycle_on_timeout = recycle_on_timeout
        self.supervised = supervised
        self.id = worker_id or make_worker_id()
        self.summary = WorkerSummary(self.id)
        chain = queue._chain
        self._hooks = chain if chain is not None and chain.execute_hooks else None

        self._held: dict[int, _Slot] = {}
        self._lock = threading.Lock()
        self._inbox: stdqueue.SimpleQueue[_Slot | None] = stdqueue.SimpleQueue()
        self._done: collections.deque[tuple[_Slot, Outcome | None, float]] = collections.deque()
        self._wake = threading.Event()
        self._dirty = True  # something may have been enqueued: try a claim
        self._more = True  # the last claim was full: more is probably waiting
        self._stopping = False
        self._hard_stop = False
        self._avg_run = 0.0
        self._last_renewal = time.monotonic()
        self._renewal_lost = False
        self._maintenance = Maintenance(
            self.backend, self.id, queue.services(), ttl=self.settings.lease_seconds
        )
        self._runners: list[threading.Thread] = []
        self._extra_runners = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: threading.Thread | None = None
        self._sem: asyncio.Semaphore | None = None
        # With no task timeout, the per-iteration scans of held jobs for deadlines are skipped
        # (they were a tenth of a no-op job's cost with hundreds held).
        self._any_timeout = any(t.options.timeout is not None for t in queue.tasks.values())
        # Event loops replaced because a handler blocked them: closed at shutdown if they
        # ever come free.
        self._wedged: list[tuple[asyncio.AbstractEventLoop, threading.Thread | None]] = []

    # -- public ----------------------------------------------------------------------------

    def stop(self) -> None:
        """Ask the worker to shut down gracefully (what SIGTERM does)."""
        self._stopping = True
        self._wake.set()

    def run(self) -> WorkerSummary:
        previous = self._install_signals()
        now = self.clock()
        self.backend.register_worker(
            WorkerInfo(
                self.id,
                socket.gethostname(),
                os.getpid(),
                self.queues,
                self.concurrency,
                types=self.types,
            ),
            now,
        )
        self._startup_cleanup(now)
        listener = self.backend.listen(self._on_change)
        self.q._wakers.add(self._on_change)
        self._start_runners()
        try:
            self._loop_forever()
        except DatabaseReplacedError:
            # Outcomes would go to a file nobody reads: do not wait for running jobs.
            log.error("the database file is gone; stopping without waiting for running jobs")
            self._hard_stop = True
            raise
        finally:
            self.q._wakers.discard(self._on_change)
            listener.close()
            self._shutdown()
            self._restore_signals(previous)
        return self.summary

    # -- the control loop ------------------------------------------------------------------

    def _on_change(self) -> None:
        self._dirty = True
        self._wake.set()

    def _loop_forever(self) -> None:
        s = self.settings
        # Deadlines below are monotonic; ``now`` (the Queue's clock) goes to the database.
        mono = time.monotonic()
        next_poll = mono
        next_beat = mono + s.heartbeat_seconds
        next_maintenance = mono
        next_cancel_check = mono + CANCEL_CHECK_INTERVAL
        while not self._stopping:
            now = self.clock()
            mono = time.monotonic()
            self._flush(now)
            if self._stopping:
                break

            claimed_nothing = False
            want = self._target_held() - len(self._held)
            if self._renewal_lost:
                want = 0  # cannot renew leases: take no new work until the database answers
            if want > 0 and (self._more or self._dirty or mono >= next_poll):
                self._dirty = False
                jobs = self._claim(want, now)
                self._more = len(jobs) == want
                if len(jobs) < want:
                    claimed_nothing = not jobs
                    next_poll = mono + s.poll_interval
                    due = self._next_due()
                    if due is not None and due > now:
                        next_poll = min(next_poll, mono + (due - now))

            if mono >= next_beat:
                self._heartbeat(now)
                next_beat = mono + s.heartbeat_seconds
            if mono >= next_maintenance:
                next_maintenance = self._maintenance.tick(now, mono)
                if self.burst and any(self._maintenance.leading.values()):
                    # A service may just have made jobs due (the rescuer requeued some): a
                    # burst must look again before deciding nothing is left.
                    self._dirty = True
                    claimed_nothing = False
            if mono >= next_cancel_check:
                # Advanced even when nothing is held: a deadline left in the past would make
                # the wait below return at once, and an idle worker would spin.
                if self._held:
                    self._check_cancels()
                next_cancel_check = mono + CANCEL_CHECK_INTERVAL
            self._check_timeouts(now, mono)

            if self.burst and claimed_nothing and not self._held and not self._done:
                return
            if self._more and self._target_held() > len(self._held):
                continue
            timeout = min(
                next_poll, next_beat, next_maintenance, next_cancel_check, self._next_deadline()
            )
            self._wake.wait(max(0.0, min(timeout - time.monotonic(), 1.0)))
            self._wake.clear()

    def _target_held(self) -> int:
        if self._avg_run <= 0:
            prefetch = self.concurrency
        else:
            prefetch = int(self.concurrency * PREFETCH_HORIZON / self._avg_run)
        return self.concurrency + max(0, min(prefetch, self.max_prefetch))

    def _claim(self, want: int, now: float) -> list[ClaimedJob]:
        request = ClaimRequest(self.id, self.types, self.queues, want, self.settings.lease_seconds)
        try:
            jobs = self.backend.claim(request, now)
        except DatabaseError as exc:
            self._db_trouble("claim skipped", exc)
            return []
        self._take(jobs)
        return jobs

    def _take(self, jobs: list[ClaimedJob]) -> None:
        """Hold and start just-claimed jobs."""
        tasks = self.q.tasks
        for job in jobs:
            slot = _Slot(job, tasks[job.type])
            if slot.task.wants_ctx:
                slot.ctx = JobContext(self, job)
            slot.cancel_requested = job.cancel_requested
            self._held[job.id] = slot
            self._dispatch(slot)
        self.summary.claimed += len(jobs)

    def _next_due(self) -> float | None:
        try:
            return self.backend.next_due(self.types, self.queues)
        except DatabaseError:
            return None

    def _flush(self, now: float) -> None:
        """Write every finished handler's outcome in one transaction."""
        if not self._done:
            return
        batch: list[tuple[_Slot, Outcome | None, float]] = []
        while self._done:
            batch.append(self._done.popleft())
        for _, _, ran in batch:
            self._avg_run = ran if self._avg_run <= 0 else 0.9 * self._avg_run + 0.1 * ran
        outcomes = [(slot, o) for slot, o, _ in batch if o is not None]
        # Claim the next jobs in the same transaction as these outcomes: one commit per batch.
        want = self._target_held() - (len(self._held) - len(batch))
        request = None
        if want > 0 and outcomes and not self._renewal_lost and not self._stopping:
            request = ClaimRequest(
                self.id, self.types, self.queues, want, self.settings.lease_seconds
            )
        jobs: list[ClaimedJob] = []
        if request is not None:
            self._dirty = False  # cleared before the claim looks, as in the loop: no lost wake-up
        try:
            if request is None:
                applied = self.backend.finish([o for _, o in outcomes], self.id, now)
            else:
                applied, jobs = self.backend.finish_and_claim(
                    [o for _, o in outcomes], self.id, request, now
                )
        except DatabaseBusyError as exc:
            self._db_trouble(f"recording {len(outcomes)} outcome(s) postponed", exc)
            self._done.extendleft(reversed(batch))
            self._dirty = self._dirty or request is not None  # that claim did not happen
            return
        except Exception as exc:
            # Not contention: maybe one outcome the database refuses. Write them one by one
            # so only the culprit is affected; if every write fails, the database itself is
            # in trouble (disk full…) and the whole batch waits, as for contention.
            if request is not None:  # the claim rolled back with the batch
                self._dirty, request = True, None
            written = self._finish_each(batch, exc, now)
            if written is None:
                return
            outcomes, applied = written
        for (_, outcome), ok in zip(outcomes, applied, strict=True):
            self._count(outcome, ok)
        if log.isEnabledFor(logging.WARNING):  # failures, retries, refusals (worker_log.py)
            worker_log.outcomes(batch, [o for _, o in outcomes], applied, self.id, now)
        # A retry may already be due, and a burst decides when to return by claiming: look
        # again now instead of relying on a wake-up (PostgreSQL only NOTIFYs for enqueues).
        full = request is not None and len(jobs) == request.limit
        if (self.burst and not full) or any(
            isinstance(o, Failed) and o.retry_at is not None for _, o in outcomes
        ):
            self._dirty = True
        for slot, _, _ in batch:
            self._held.pop(slot.job.id, None)
        if request is not None:  # after the pops: a retried job may come back with its id
            self._take(jobs)
            self._more = full

    def _finish_each(
        self, batch: list[tuple[_Slot, Outcome | None, float]], first: Exception, now: float
    ) -> tuple[list[tuple[_Slot, Outcome]], list[bool]] | None:
        """Write a failed batch's outcomes one at a time. An outcome the database refuses is
        replaced by a final failure naming why (a storable one, so it cannot fail forever).
        Returns what was written, or None when the database refused even that: the rest of
        the batch goes back to wait, as for contention."""
        log.warning(
            "recording %d outcome(s) in one batch failed (%s); writing them one by one",
            len(batch),
            _one_line(first),
        )
        outcomes: list[tuple[_Slot, Outcome]] = []
        applied: list[bool] = []
        for i, (slot, outcome, _) in enumerate(batch):
            if outcome is None:
                continue
            try:
                (ok,) = self.backend.finish([outcome], self.id, now)
            except DatabaseBusyError as exc:
                self._postpone_rest(batch, i, outcomes, applied, exc)
                return None
            except Exception as exc:
                fallback = execution.unstorable(outcome, _one_line(exc))
                try:
                    (ok,) = self.backend.finish([fallback], self.id, now)
                except Exception as again:
                    self._postpone_rest(batch, i, outcomes, applied, again)
                    return None
                log.error(
                    "job %d attempt %d: its outcome could not be stored (%s); recorded as %s",
                    outcome.job_id,
                    outcome.attempt,
                    _one_line(exc),
                    getattr(fallback, "error_code", "failed"),
                )
                outcome = fallback
            outcomes.append((slot, outcome))
            applied.append(ok)
        return outcomes, applied

    def _postpone_rest(
        self,
        batch: list[tuple[_Slot, Outcome | None, float]],
        i: int,
        outcomes: list[tuple[_Slot, Outcome]],
        applied: list[bool],
        exc: Exception,
    ) -> None:
        """Count what was written, put batch[i:] back in the queue of outcomes to write."""
        for (_, outcome), ok in zip(outcomes, applied, strict=True):
            self._count(outcome, ok)
        for slot, _, _ in batch[:i]:  # written, or completed in the handler's transaction
            self._held.pop(slot.job.id, None)
        self._done.extendleft(reversed(batch[i:]))
        error = exc if isinstance(exc, DatabaseError) else DatabaseError(_one_line(exc))
        self._db_trouble(f"recording {len(batch) - i} outcome(s) postponed", error)

    def _db_trouble(self, what: str, exc: DatabaseError) -> None:
        """Contention is expected and retried quietly; anything else (disk full, read-only,
        corrupt) is an error an operator must see — retried after a pause, never a crash
        mid-batch (leases recover held jobs if it persists)."""
        self.summary.db_errors += 1
        if isinstance(exc, DatabaseBusyError):
            log.warning("%s: %s", what, exc)
        else:
            log.error("%s: %s", what, exc)
            time.sleep(min(1.0, self.settings.poll_interval))

    def _count(self, outcome: Outcome, ok: bool) -> None:
        s = self.summary
        if not ok:
            s.refused += 1  # logged by worker_log.outcomes
            return
        name = type(outcome).__name__
        if isinstance(outcome, Failed):
            name = "Retried" if outcome.retry_at is not None else "Failed"
        s.outcomes[name] = s.outcomes.get(name, 0) + 1
        if name == "Succeeded":
            s.succeeded += 1
        elif name == "Failed":
            s.failed += 1
        elif name == "Retried":
            s.retried += 1
        elif name == "Cancelled":
            s.cancelled += 1
        elif name == "Released":
            s.released += 1

    # -- leases, rescue, cancellation, timeouts -------------------------------------------

    def _heartbeat(self, now: float) -> None:
        """Renew the leases of every held job in one write. If renewing keeps failing for a
        whole lease, those leases are gone: stop taking work and never start buffered jobs
        (another worker may already run them)."""
        held = [
            (s.job.id, s.job.attempt) for s in self._held.values() if s.state in (BUFFERED, STARTED)
        ]
        try:
            ok = self.backend.heartbeat(self.id, held, self.settings.lease_seconds, now)
            self.backend.worker_seen(self.id, now, self._counters())
        except DatabaseError as exc:
            self._db_trouble("heartbeat failed", exc)
            lapsed = time.monotonic() - self._last_renewal
            if lapsed >= self.settings.lease_seconds and not self._renewal_lost:
                log.warning(
                    "leases could not be renewed for %ss: taking no new work and "
                    "giving up %d held job(s)",
                    self.settings.lease_seconds,
                    len(held),
                )
                self._renewal_lost = True
                for job_id, _ in held:
                    self._lose(job_id)
            return
        self._last_renewal = time.monotonic()
        self._renewal_lost = False
        for (job_id, _), alive in zip(held, ok, strict=True):
            if not alive:
                self._lose(job_id)

    def _counters(self) -> dict[str, int]:
        """Totals only this worker sees, kept on its registry row for /metrics."""
        rescued = self.summary.rescued + sum(
            getattr(service, "total", 0) for service in self._maintenance.services
        )
        return {
            "refused": self.summary.refused,
            "rescued": rescued,
            "db_errors": self.summary.db_errors,
        }

    def _startup_cleanup(self, now: float) -> None:
        """Recover at once the jobs of this host's workers whose process is gone."""
        host = socket.gethostname()
        dead = [
            wid
            for wid, pid in self.backend.host_workers(host)
            if wid != self.id and not _pid_alive(pid)
        ]
        if dead:
            report = self.backend.recover_workers(dead, now)
            self.summary.rescued += len(report.recovered) + len(report.exhausted)
            log.info(
                "startup cleanup: %d dead worker(s) on %s, %d job(s) recovered",
                len(dead),
                host,
                len(report.recovered) + len(report.exhausted),
            )

    def beat_one(self, ctx: JobContext) -> bool:
        """ctx.heartbeat(): extend one lease now, from the handler's thread. A database too
        busy to answer is not a lost lease: the handler hears False only once the lease has
        really run out by our own reckoning."""
        now = self.clock()
        try:
            (ok,) = self.backend.heartbeat(
                self.id, [(ctx.job_id, ctx.attempt)], self.settings.lease_seconds, now
            )
        except DatabaseError as exc:
            log.warning("ctx.heartbeat() for job %d failed: %s", ctx.job_id, exc)
            return time.monotonic() - self._last_renewal < self.settings.lease_seconds
        if not ok:
            self._lose(ctx.job_id)
        return ok

    def complete_in(self, ctx: JobContext, connection: Any, result: Any) -> None:
        slot = self._held.get(ctx.job_id)
        if slot is None:
            raise InvalidTransitionError(f"job {ctx.job_id} is not held by this worker")
        outcome = execution.succeeded(
            slot.job, slot.started_at, result, self.settings.max_result_bytes
        )
        if isinstance(outcome, Failed):
            raise JobError(outcome.error_code, outcome.error_detail, retry=False)
        assert isinstance(outcome, Succeeded)
        if not self.backend.complete_in(connection, outcome, self.id, self.clock()):
            raise InvalidTransitionError(
                f"job {ctx.job_id} attempt {ctx.attempt} no longer holds the job (its lease "
                "was recovered); roll back your transaction"
            )

    def _lose(self, job_id: int) -> None:
        """Our lease on a job is gone: never start it, and expect its outcome to be refused."""
        with self._lock:
            slot = self._held.get(job_id)
            if slot is not None and slot.state == BUFFERED:
                slot.state = LOST
                self._held.pop(job_id, None)
        log.warning("lease on job %d was lost; another worker may run it", job_id)

    def _check_cancels(self) -> None:
        ids = [i for i, s in self._held.items() if not s.cancel_requested]
        if not ids:
            return
        try:
            requested = self.backend.cancel_requested(ids)
        except DatabaseError:
            return
        for job_id in requested:
            slot = self._held.get(job_id)
            if slot is None:
                continue
            slot.cancel_requested = True
            if slot.ctx is not None:
                slot.ctx._cancel.set()
            if slot.async_task is not None:
                slot.async_task.get_loop().call_soon_threadsafe(slot.async_task.cancel)

    def _next_deadline(self) -> float:
        if not self._any_timeout:
            return float("inf")
        # An async job's own loop enforces its deadline; the control thread looks only once
        # the grace is over (waking at the deadline itself would spin until the loop acts).
        deadlines = [
            s.deadline + (ASYNC_WEDGE_GRACE if s.task.is_async else 0.0)
            for s in self._held.values()
            if s.deadline is not None and s.state == STARTED
        ]
        return min(deadlines, default=float("inf"))

    def _check_timeouts(self, now: float, mono: float) -> None:
        """Sync handlers cannot be interrupted: past the timeout the attempt is failed with
        TIMEOUT:JOB, its thread is left to finish (its result dropped) and replaced. An async
        handler is cancelled by its own loop at the deadline; one still running a grace period
        later never yields (it blocks the loop): it is failed the same way and the loop is
        replaced for new work."""
        if not self._any_timeout:
            return
        for slot in list(self._held.values()):
            if slot.deadline is None or slot.deadline > mono:
                continue
            wedged = slot.task.is_async
            if wedged and slot.deadline + ASYNC_WEDGE_GRACE > mono:
                continue
            exc = JobError(
                "TIMEOUT:JOB", f"ran longer than its {slot.task.options.timeout}s timeout"
            )
            timed_out = execution.failed(slot.task, slot.job, slot.started_at, now, exc)
            with self._lock:
                if slot.state != STARTED:
                    continue
                slot.state = ABANDONED
                slot.timed_out = timed_out  # under the lock: _end reads it once abandoned
                if not wedged:
                    self._extra_runners += 1
            self._done.append((slot, timed_out, mono - slot.begun))
            if wedged:
                log.warning(
                    "async job %d is blocking the event loop past its timeout (it never "
                    "awaits); failed it and moved new async work to a fresh event loop",
                    slot.job.id,
                )
                self._replace_loop(slot)
                if not self.recycle_on_timeout:
                    continue
            if self.recycle_on_timeout:
                # Under the supervisor, killing the stuck thread is possible after all: stop
                # gracefully and exit so a fresh process takes this one's place.
                log.warning(
                    "job %d ran past its timeout in a thread that cannot be interrupted; "
                    "this worker process will exit so the supervisor replaces it",
                    slot.job.id,
                )
                self.summary.recycled = True
                self._stopping = True
            else:
                self._spawn_runner()

    # -- running handlers ------------------------------------------------------------------

    def _dispatch(self, slot: _Slot) -> None:
        if slot.task.is_async:
            loop = self._ensure_loop()
            assert self._sem is not None
            asyncio.run_coroutine_threadsafe(self._run_async(slot, self._sem), loop)
        else:
            self._inbox.put(slot)

    def _begin(self, slot: _Slot) -> bool:
        with self._lock:
            if slot.state != BUFFERED:
                return False
            slot.state = STARTED
        slot.started_at = self.clock()
        slot.begun = time.monotonic()
        if log.isEnabledFor(logging.DEBUG):  # --verbose: one line per job started
            worker_log.started(slot.job, self.id)
        timeout = slot.task.options.timeout
        if timeout is not None:
            slot.deadline = slot.begun + timeout
        if self._hooks is not None:  # on the handler's thread / task, so it shares its context
            slot.hooks = self._hooks.begin(slot.job, self.id)
        return True

    def _end(self, slot: _Slot, outcome: Outcome | None) -> None:
        with self._lock:
            abandoned = slot.state != STARTED
            if not abandoned:
                slot.state = DONE
        if slot.hooks is not None and self._hooks is not None:
            self._hooks.end(slot.hooks, slot.timed_out if abandoned else outcome, slot.ctx)
        if abandoned:
            return  # abandoned after a timeout: its outcome was already recorded
        self._done.append((slot, outcome, time.monotonic() - slot.begun))
        # is_set() takes no lock: only the first of a burst of finishing jobs pays for set().
        if not self._wake.is_set():
            self._wake.set()

    def _start_runners(self) -> None:
        if any(not t.is_async for t in self.q.tasks.values()):
            for _ in range(self.concurrency):
                self._spawn_runner()

    def _spawn_runner(self) -> None:
        thread = threading.Thread(
            target=self._runner, name=f"errands-runner-{len(self._runners)}", daemon=True
        )
        self._runners.append(thread)
        thread.start()

    def _runner(self) -> None:
        while True:
            slot = self._inbox.get()
            if slot is None:
                return
            if not self._begin(slot):
                continue
            self._end(slot, self._run_sync(slot))
            with self._lock:
                if self._extra_runners > 0 and slot.state == ABANDONED:
                    self._extra_runners -= 1
                    return

    def _run_sync(self, slot: _Slot) -> Outcome | None:
        job, task, started = slot.job, slot.task, slot.started_at
        kwargs: dict[str, Any] = {}
        try:
            kwargs = execution.prepare(task, job, slot.ctx)
            result = task.fn(**kwargs)
        except Exception as exc:
            if slot.cancel_requested:
                return execution.cancelled(job, started)
            exc = execution.explain(task, kwargs, exc)
            return execution.failed(task, job, started, self.clock(), exc)
        except BaseException as exc:
            # SystemExit, KeyboardInterrupt…: raised by the handler itself (signals reach the
            # main thread, never a runner), so it ends this attempt, not the worker — and the
            # runner thread lives on to take the next job.
            return execution.failed(task, job, started, self.clock(), exc)
        if slot.ctx is not None and slot.ctx.completed:
            return None
        if slot.cancel_requested:
            return execution.cancelled(job, started)
        return execution.succeeded(job, started, result, self.settings.max_result_bytes)

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            loop = asyncio.new_event_loop()
            self._sem = asyncio.Semaphore(self.concurrency)
            self._loop_thread = threading.Thread(
                target=_run_loop, args=(loop,), name="errands-async", daemon=True
            )
            self._loop_thread.start()
            self._loop = loop
        return self._loop

    def _replace_loop(self, slot: _Slot) -> None:
        """The loop running ``slot`` is blocked by its handler: new async jobs go to a fresh
        loop. The old one keeps its thread; its other jobs resume if the handler ever returns
        (their outcomes are recorded as usual; the blocked job's is dropped)."""
        task = slot.async_task
        if task is None or task.get_loop() is not self._loop:
            return  # already replaced
        self._wedged.append((self._loop, self._loop_thread))
        self._loop, self._loop_thread, self._sem = None, None, None
        # Jobs still waiting for their turn on the blocked loop start on the new one instead
        # (whichever loop reaches _begin first runs it; the other finds it taken).
        for other in list(self._held.values()):
            if other.state == BUFFERED and other.task.is_async:
                self._dispatch(other)

    async def _run_async(self, slot: _Slot, sem: asyncio.Semaphore) -> None:
        async with sem:
            if not self._begin(slot):
                return
            slot.async_task = asyncio.current_task()
            self._end(slot, await self._await_handler(slot))

    async def _await_handler(self, slot: _Slot) -> Outcome | None:
        job, task, started = slot.job, slot.task, slot.started_at
        timeout = task.options.timeout
        kwargs: dict[str, Any] = {}
        try:
            async with asyncio.timeout(timeout) as scope:
                kwargs = execution.prepare(task, job, slot.ctx)
                result = await task.fn(**kwargs)
        except asyncio.CancelledError:
            if slot.cancel_requested:
                return execution.cancelled(job, started)
            return None  # hard shutdown: the lease recovers it
        except Exception as exc:
            if slot.cancel_requested:
                return execution.cancelled(job, started)
            if isinstance(exc, TimeoutError) and scope.expired():
                exc = JobError("TIMEOUT:JOB", f"ran longer than its {timeout}s timeout")
            exc = execution.explain(task, kwargs, exc)
            return execution.failed(task, job, started, self.clock(), exc)
        except BaseException as exc:
            # Caught here, inside the task: asyncio would re-raise SystemExit and
            # KeyboardInterrupt out of run_forever and kill the loop every async job runs on.
            return execution.failed(task, job, started, self.clock(), exc)
        if slot.ctx is not None and slot.ctx.completed:
            return None
        if slot.cancel_requested:
            return execution.cancelled(job, started)
        return execution.succeeded(job, started, result, self.settings.max_result_bytes)

    # -- shutdown --------------------------------------------------------------------------

    def _shutdown(self) -> None:
        """Hand back unstarted jobs, let running ones finish within the grace period, record
        everything, then stop the runners."""
        released: list[Outcome] = []
        with self._lock:
            for slot in self._held.values():
                if slot.state == BUFFERED:
                    slot.state = RELEASED
                    released.append(Released(slot.job.id, slot.job.attempt))
                    self._done.append((slot, released[-1], 0.0))
        deadline = time.monotonic() + self.settings.shutdown_timeout
        while not self._hard_stop and time.monotonic() < deadline:
            self._flush(self.clock())
            if not any(s.state == STARTED for s in self._held.values()):
                break
            self._wake.wait(0.05)
            self._wake.clear()
        if not self._hard_stop:
            self._flush(self.clock())
        else:
            self.summary.interrupted = True
        for _ in self._runners:
            self._inbox.put(None)
        if self._loop is not None:
            self._close_loop(self._loop, self._loop_thread)
        for loop, thread in self._wedged:
            self._close_loop(loop, thread, wait=0.1)
        self._maintenance.stop()
        try:
            self.backend.worker_stopped(self.id, self.clock(), self._counters())
        except DatabaseError as exc:
            log.warning("could not mark worker stopped: %s", exc)

    def _close_loop(
        self,
        loop: asyncio.AbstractEventLoop,
        thread: threading.Thread | None,
        wait: float = 5.0,
    ) -> None:
        """Stop the async handlers' loop; its thread then closes it (an unclosed loop leaks
        its selector and self-pipe sockets: a ResourceWarning every time a worker with async
        tasks returns). A loop a handler still blocks closes whenever that handler returns."""
        loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join(timeout=wait)

    # -- signals ---------------------------------------------------------------------------

    def _install_signals(self) -> dict[int, Any]:
        if not self.handle_signals or threading.current_thread() is not threading.main_thread():
            return {}
        previous: dict[int, Any] = {}
        for sig in (signal.SIGTERM, signal.SIGINT):
            # Under the supervisor, Ctrl-C's SIGINT reaches the whole process group: the
            # supervisor turns it into one SIGTERM per child, so a child ignores it.
            handler = signal.SIG_IGN if self.supervised and sig == signal.SIGINT else None
            previous[sig] = signal.signal(sig, handler or self._on_signal)
        return previous

    def _restore_signals(self, previous: dict[int, Any]) -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self._stopping and self.supervised:
            # The same stop can arrive twice (a signal to the whole process group or cgroup,
            # and the supervisor passing it on): stopping at once is the supervisor's call,
            # made on a second signal *it* receives.
            log.info("%s again: already stopping gracefully", signal.Signals(signum).name)
            return
        if self._stopping:
            log.warning(
                "second %s: stopping now; leases will recover running jobs",
                signal.Signals(signum).name,
            )
            self._hard_stop = True
        else:
            log.info("%s: finishing running jobs, then stopping", signal.Signals(signum).name)
            self._stopping = True
        # No self._wake.set() here: the handler runs on the main thread between bytecodes,
        # possibly while that thread holds the Event's (non-reentrant) lock inside
        # _wake.wait(), and set() would deadlock every thread. Only flags are set; the control
        # loop waits at most 1 s (50 ms during shutdown), so it sees them promptly.


def _run_loop(loop: asyncio.AbstractEventLoop) -> None:
    # The thread closes its own loop once stopped: a loop replaced because a handler blocked
    # it stops only when that handler returns, long after the worker stopped waiting for it.
    try:
        loop.run_forever()
    finally:
        loop.close()


def _one_line(exc: BaseException) -> str:
    return execution.summary(exc).splitlines()[0]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True
