"""The worker's control loop: claims batches, hands them to the executor, records outcomes.

One control thread owns every database write of the worker (claims, outcomes, heartbeats,
maintenance), so writes are naturally grouped: while one transaction commits, the next
handlers' outcomes pile up and go in the next. Handlers run in the executor (executor.py);
every backend call goes through ``WorkerDatabase`` (worker/db.py), which classifies and counts
database errors.

``tick(now)`` is one step of the loop (claim what fits, record finished outcomes, heartbeat,
cancel and timeout checks, maintenance when due); ``run()`` calls it until the worker stops,
sleeping between steps until woken, so a test can drive the steps itself with a fake clock.

Two clocks: the Queue's ``clock`` (wall time) only for what is stored in or compared by the
database; a monotonic clock for every local deadline (heartbeats, timeouts, polling,
maintenance, cancel checks), so a wall-clock step never stalls or rushes them.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Sequence

from ..backends import forks
from ..backends.base import ClaimedJob, ClaimRequest, Retried, Snoozed, Suspended, WorkerInfo
from ..backends.verbs import Listener
from ..context import JobContext
from ..errors import (
    ConfigurationError,
    DatabaseError,
    DatabaseReplacedError,
    QueueClosedError,
)
from ..fair import fair_specs
from ..limits import limit_specs
from ..maintenance.runner import Maintenance
from ..order import order_specs
from ..tasks import declared_rows
from .attached import Attached
from .db import WorkerDatabase
from .executor import BUFFERED, STARTED, Executor, Finished, Slot, SlotState
from .inputs import WorkerInputs, WorkerSource
from .lease import HandlerLeases, JobLease
from .quarantine import Quarantine
from .recorder import Recorder, WorkerSummary
from .signals import SignalHandlers, Stop
from .supervisor import pid_alive

log = logging.getLogger("errands.worker")

__all__ = ["SlotState", "Worker", "WorkerInputs", "WorkerSummary", "make_worker_id"]

# Prefetch aims to hold as many jobs as the runners will start within this horizon, so tiny
# jobs are claimed in large batches and slow ones are not hoarded away from other workers.
PREFETCH_HORIZON = 0.02
# The cap on that prefetch, reached only by jobs shorter than ~concurrency x 20 µs. It bounds
# the outcome batch too (about half the jobs held finish during each commit), and each batch
# pays one commit — an fsync, 0.5 to 2.5 ms on this project's machines: with 200 the
# worker's batches were ~105 jobs and its commits cost 6-25 µs per job; with 1000 they are
# ~500 and the worker uses 15-40 % less CPU per no-op job (BENCHMARKS.md, issue #12).
DEFAULT_MAX_PREFETCH = 1000
CANCEL_CHECK_INTERVAL = 1.0
# The longest sleep between steps: signal handlers only set flags (worker/signals.py), so the
# loop must look at them at least this often.
MAX_WAIT = 1.0
AGAIN = -1.0  # what tick() returns when more work is probably claimable right away


def make_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Worker(Attached, HandlerLeases):
    """Runs a Queue's jobs: ``run()`` until stopped (or, with ``burst``, until nothing is
    left), or ``start()``, ``tick(now)`` step by step, ``close()``. Takes a Queue or just
    the ``WorkerInputs`` it needs; ``monotonic`` is the clock of every local deadline."""

    def __init__(
        self,
        inputs: WorkerSource | WorkerInputs,
        *,
        concurrency: int = 8,
        queues: Sequence[str] | None = None,
        burst: bool = False,
        handle_signals: bool = True,
        max_prefetch: int = DEFAULT_MAX_PREFETCH,
        worker_id: str | None = None,
        recycle_on_timeout: bool = False,
        supervised: bool = False,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if concurrency < 1:
            raise ConfigurationError(f"concurrency must be >= 1, got {concurrency}")
        if not isinstance(inputs, WorkerInputs):
            inputs = WorkerInputs.of(inputs)
        if not inputs.tasks:
            raise ConfigurationError(
                "this Queue has no tasks registered, so a worker would never claim anything; "
                "register handlers with @q.task before run_worker"
            )
        if isinstance(queues, str):
            queues = [q for q in queues.split(",") if q]
        self.inputs = inputs
        self.backend = inputs.backend
        self.settings = inputs.settings
        self.clock = inputs.clock
        self.tasks = inputs.tasks
        self.concurrency = concurrency
        self.queues = None if queues is None else list(queues)
        self.types = sorted(inputs.tasks)
        self.burst = burst
        self.handle_signals = handle_signals
        self.max_prefetch = max_prefetch
        self.recycle_on_timeout = recycle_on_timeout
        self.supervised = supervised
        self.id = worker_id or make_worker_id()
        self.summary = WorkerSummary(self.id)
        self._hooks = inputs.hooks
        self._mono = monotonic
        self.db = WorkerDatabase(pause=min(1.0, self.settings.poll_interval))
        self.recorder = Recorder(self.backend, self.db, self.id, self.summary)

        self._held: dict[int, Slot] = {}
        self._quarantine = Quarantine()  # a job whose previous attempt was lost runs alone
        self._progress_lock = threading.Lock()  # ctx.progress() on handler threads
        self._wake = threading.Event()
        self.executor = Executor(
            concurrency=concurrency,
            worker_id=self.id,
            clock=self.clock,
            monotonic=monotonic,
            hooks=self._hooks,
            max_result_bytes=self.settings.max_result_bytes,
            wake=self._wake,
            start_within=self.settings.lease_seconds,
        )
        self._done = self.executor.done
        self._dirty = True  # something may have been enqueued: try a claim
        self._more = True  # the last claim was full: more is probably waiting
        self._stop = Stop()
        # What its Queue may ask of it (attached.py); the supervisor's pid, watched.
        self._control: threading.Thread | None = None
        self._parent = os.getppid() if supervised else None
        self._stopped = threading.Event()
        self.generation = forks.generation  # see backends/forks.py
        self._signals = SignalHandlers(self._stop, supervised=supervised)
        self._avg_run = 0.0
        self._last_renewal = monotonic()
        self._renewal_lost = False
        self._maintenance = Maintenance(
            self.backend, self.id, inputs.services, ttl=self.settings.lease_seconds
        )
        self._listener: Listener | None = None
        # When each periodic part of a step is next due (monotonic; set by start()).
        self._next_poll = self._next_beat = self._next_maintenance = 0.0
        self._next_cancel_check = 0.0
        # With no task timeout, the per-step scans of held jobs for deadlines are skipped
        # (they were a tenth of a no-op job's cost with hundreds held).
        self._any_timeout = any(t.options.timeout is not None for t in inputs.tasks.values())
        # Flow control: the code's limits (registered at start; tasks sharing a key must
        # agree), and whether claims must also take limited jobs (backends/flow.py).
        self._limits = limit_specs([t.options.limit for t in inputs.tasks.values()])
        self._fair = fair_specs(t.options for t in inputs.tasks.values())  # backends/fair.py
        self._order = order_specs(t.options for t in inputs.tasks.values())  # backends/order.py
        self._limited = bool(self._limits) or bool(self._fair) or bool(self._order)
        self._stale_limits: set[str] = set()

    # -- public ----------------------------------------------------------------------------

    def stop(self) -> None:
        """Ask the worker to shut down gracefully (what SIGTERM does)."""
        self._stop.graceful = True
        self._wake.set()

    def _run(self) -> None:
        if self.handle_signals:
            self._signals.install()
        try:
            self.start()
            try:
                while (pause := self.tick(self.clock())) is not None:
                    if pause >= 0:
                        # Even a zero wait lets the runner threads have the GIL.
                        self._wake.wait(min(pause, MAX_WAIT))
                        self._wake.clear()
            except (DatabaseReplacedError, QueueClosedError) as exc:
                # Outcomes cannot be written (or would go to a file nobody reads): do not
                # wait for running jobs; their leases recover them.
                log.error("%s; stopping without waiting for running jobs", exc)
                self._stop.now = True
                raise
            finally:
                self.close()
        finally:
            self._signals.restore()

    def start(self) -> None:
        """Register, recover this host's dead workers' jobs, listen for new work, start the
        executor. ``run()`` does this; a test driving ``tick`` calls it first."""
        now = self.clock()
        info = WorkerInfo(
            self.id,
            socket.gethostname(),
            os.getpid(),
            self.queues,
            self.concurrency,
            types=self.types,
            schedules=list(self.inputs.schedules),
        )
        if self._limits:  # first: a worker whose caps a live worker contradicts never starts
            lease = self.settings.lease_seconds
            self.db.call(self.backend.register_limits, self._limits, now, lease)
        self.db.call(self.backend.register_worker, info, now)
        # The options of the tasks this worker runs, for producers that enqueue them by name.
        self.db.call(self.backend.declare_task_types, declared_rows(self.tasks, self.id), now)
        self._startup_cleanup(now)
        self._listener = self.inputs.listen(self._on_change)
        self.executor.start(sync=any(not t.is_async for t in self.tasks.values()))
        mono = self._mono()
        self._next_poll = self._next_maintenance = mono
        self._next_beat = mono + self.settings.heartbeat_seconds
        self._next_cancel_check = mono + CANCEL_CHECK_INTERVAL

    def close(self) -> None:
        """Stop listening, hand back unstarted jobs, let running ones finish within the grace
        period (not after a hard stop), record everything, stop the executor."""
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        self._shutdown()

    def tick(self, now: float) -> float | None:
        """One step of the control loop at wall time ``now``: record finished outcomes (and
        claim in the same transaction), maintenance when due, claim what fits, then whatever
        else is due by the monotonic clock — heartbeat, cancel checks — and timeouts. Returns how
        long the caller may sleep before the next step (a finishing handler or a wake-up
        cuts the sleep short; ``AGAIN``, negative: step again at once, the last claim was
        full), or None once the worker is done: asked to stop, or a burst found nothing left
        to do."""
        if self._stop.graceful:
            return None
        s = self.settings
        mono = self._mono()
        self._flush(now)
        if self._stop.graceful:
            return None
        self._run_quarantined()

        if mono >= self._next_maintenance:
            # Before the claim, which then sees what a service made due in this same step:
            # a burst decides "nothing left" from it without waiting out a service's timer.
            self._next_maintenance = self.db.call(self._maintenance.tick, now, mono)
            if self.burst and any(self._maintenance.leading.values()):
                self._dirty = True

        claimed_nothing = False
        want = self._quarantine.limit(self._target_held() - len(self._held))
        if self._renewal_lost or self._quarantine.active:
            # Cannot renew leases: take no new work until the database answers. A job in
            # quarantine: it runs alone.
            want = 0
        if want > 0 and (self._more or self._dirty or mono >= self._next_poll):
            self._dirty = False
            jobs = self._claim(want, now)
            self._more = len(jobs) == want
            if len(jobs) < want:
                claimed_nothing = not jobs
                self._next_poll = mono + s.poll_interval
                due = self._next_due(now)
                if due is not None and due > now:
                    self._next_poll = min(self._next_poll, mono + (due - now))

        if mono >= self._next_beat:
            self._heartbeat(now)
            self._next_beat = mono + s.heartbeat_seconds
        if mono >= self._next_cancel_check:
            self._check_parent()
            # Advanced even when nothing is held: a deadline left in the past would make
            # the wait return at once, and an idle worker would spin.
            if self._held:
                self._check_cancels()
            self._next_cancel_check = mono + CANCEL_CHECK_INTERVAL
        self._check_timeouts(now, mono)

        if self.burst and claimed_nothing and not self._held and not self._done:
            return None
        if want > 0 and self._more and self._target_held() > len(self._held):
            return AGAIN
        wake_at = min(
            # Holding all it may (want 0), a poll would claim nothing: a finishing handler
            # wakes the loop. Waking for a poll time left in the past would spin the loop,
            # taking the GIL from the handlers (jobs that record steps: 150,000 steps for
            # 2,000 jobs).
            self._next_poll if want > 0 else float("inf"),
            self._next_beat,
            self._next_maintenance,
            self._next_cancel_check,
            self._next_deadline(),
        )
        return max(0.0, wake_at - self._mono())

    # -- claiming --------------------------------------------------------------------------

    def _on_change(self) -> None:
        self._dirty = True
        self._wake.set()

    def _target_held(self) -> int:
        if self._avg_run <= 0:
            prefetch = self.concurrency
        else:
            prefetch = int(self.concurrency * PREFETCH_HORIZON / self._avg_run)
        return self.concurrency + max(0, min(prefetch, self.max_prefetch))

    def _request(self, want: int, from_front: bool = False) -> ClaimRequest:
        lease, limited = self.settings.lease_seconds, self._limited
        fair, order = self._fair, self._order
        return ClaimRequest(
            self.id, self.types, self.queues, want, lease, limited, fair, order, from_front
        )

    def _claim(self, want: int, now: float) -> list[ClaimedJob]:
        try:
            jobs = self.db.call(self.backend.claim, self._request(want), now)
            if not jobs and self.burst:
                # The claim may have resumed past a due job (backends/claim_position.py: a
                # lease recovered, a clock behind): a burst decides "nothing left" only from
                # a claim that scanned from the front.
                jobs = self.db.call(self.backend.claim, self._request(want, True), now)
        except DatabaseError as exc:
            self.db.survive("claim skipped", exc)
            return []
        self._take(jobs)
        return jobs

    def _take(self, jobs: list[ClaimedJob]) -> None:
        """Hold and start just-claimed jobs — a suspect waits to run alone (quarantine.py)."""
        tasks = self.tasks
        hand_back: list[Slot] = []
        for job in jobs:
            slot = Slot(job, tasks[job.type])
            if slot.task.wants_ctx:
                slot.ctx = JobContext(JobLease(self, slot), job)
            slot.cancel_requested = job.cancel_requested
            self._held[job.id] = slot
            back = self._quarantine.take(slot, self._held)
            if back is None:
                self.executor.submit(slot)
            else:
                hand_back.extend(back)
        if hand_back:
            self.executor.release_unstarted(hand_back)
        self.summary.claimed += len(jobs)
        self._quarantine.claimed(jobs)
        self._run_quarantined()  # alone already: start it now

    def _run_quarantined(self) -> None:
        ended, start = self._quarantine.step(self._held, bool(self._done))
        if ended:
            self._dirty = True  # claim again
        if start is not None:
            self.executor.submit(start)

    def _next_due(self, now: float) -> float | None:
        # Only what falls due after now matters here (what is due already, the claim took
        # or others hold); on PostgreSQL it also keeps the scan off the dead index entries
        # of the jobs claimed before now.
        try:
            return self.db.call(self.backend.next_due, self.types, self.queues, now)
        except DatabaseError as exc:
            self.db.survive("next due", exc, quiet=True)
            return None

    # -- recording outcomes ----------------------------------------------------------------

    def _flush(self, now: float) -> None:
        """Record every finished handler's outcome in one transaction, claiming the next
        jobs in the same one."""
        if not self._done:
            return
        batch: list[Finished] = []
        while self._done:
            batch.append(self._done.popleft())
        for _, _, ran in batch:
            self._avg_run = ran if self._avg_run <= 0 else 0.9 * self._avg_run + 0.1 * ran
        self._flush_progress([slot for slot, _, _ in batch])
        outcomes = [(slot, o) for slot, o, _ in batch if o is not None]
        # Claim the next jobs in the same transaction as these outcomes: one commit per batch.
        want = self._quarantine.limit(self._target_held() - (len(self._held) - len(batch)))
        request = None
        if (
            want > 0
            and outcomes
            and not self._renewal_lost
            and not self._quarantine.active
            and not self._stop.graceful
        ):
            request = self._request(want)
            self._dirty = False  # cleared before the claim looks, as in the loop: no lost wake-up
        rec = self.recorder.write(batch, outcomes, request, now)
        if request is not None and not rec.claimed:
            self._dirty = True  # that claim did not happen
        if rec.kept:
            self._done.extendleft(reversed(batch[len(batch) - rec.kept :]))
            del batch[len(batch) - rec.kept :]
            for slot, _, _ in batch:  # written, or completed in the handler's transaction
                self._held.pop(slot.job.id, None)
            return
        # A retry may already be due, and a burst decides when to return by claiming: look
        # again now instead of relying on a wake-up (PostgreSQL only NOTIFYs for enqueues).
        full = rec.claimed and request is not None and len(rec.jobs) == request.limit
        if (self.burst and not full) or any(
            type(o) in (Retried, Snoozed, Suspended) for _, o in rec.written
        ):
            self._dirty = True
        for slot, _, _ in batch:
            self._held.pop(slot.job.id, None)
        if rec.claimed:  # after the pops: a retried job may come back with its id
            self._take(rec.jobs)
            self._more = full

    # -- leases, rescue, cancellation, timeouts -------------------------------------------

    def _heartbeat(self, now: float) -> None:
        """Renew the leases of every held job in one write. If renewing keeps failing for a
        whole lease, those leases are gone: stop taking work and never start buffered jobs
        (another worker may already run them)."""
        self._flush_progress(list(self._held.values()))
        self._write_starts()
        self._refresh_limits(now)
        held = [
            (s.job.id, s.job.attempt) for s in self._held.values() if s.state in (BUFFERED, STARTED)
        ]
        db, backend = self.db, self.backend
        try:
            ok = db.call(backend.heartbeat, self.id, held, self.settings.lease_seconds, now)
            db.call(backend.worker_seen, self.id, now, self._counters())
        except DatabaseError as exc:
            db.survive("heartbeat failed", exc)
            lapsed = self._mono() - self._last_renewal
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
        self._last_renewal = self._mono()
        self._renewal_lost = False
        for (job_id, _), alive in zip(held, ok, strict=True):
            if not alive:
                self._lose(job_id)

    def _write_starts(self) -> None:
        """The real starts of rate-limited handlers still running: until written (here, or
        with their outcome), each counts in its rate's windows as starting a lease after its
        claim, so a long handler would hold its window back (backends/flow.py)."""
        started = [
            s
            for s in self._held.values()
            if s.job.claimed_at is not None and s.state == STARTED and not s.start_written
        ]
        if not started:
            return
        rows = [(s.job.id, s.job.claimed_at or 0.0, s.started_at) for s in started]
        try:
            self.db.call(self.backend.record_starts, rows)
        except DatabaseError as exc:
            self.db.survive("rate-limited starts not written", exc, quiet=True)
            return
        for s in started:
            s.start_written = True

    def _refresh_limits(self, now: float) -> None:
        """This worker's declared limits are live (a worker declaring other caps for a key
        is refused while they are: docs/flow-control.md); warn once if another replaced them."""
        if not self._limits:
            return
        try:
            stale = self.db.call(self.backend.refresh_limits, self._limits, now)
        except DatabaseError as exc:
            self.db.survive("limits not refreshed", exc, quiet=True)
            return
        for key in set(stale) - self._stale_limits:
            log.warning(
                "limit %r: the caps stored for it are not this worker's code's any more "
                "(another worker declared others); the stored ones apply",
                key,
            )
        self._stale_limits |= set(stale)

    def _counters(self) -> dict[str, int]:
        """Totals only this worker sees, kept on its registry row for /metrics."""
        rescued = self.summary.rescued + sum(
            getattr(service, "total", 0) for service in self._maintenance.services
        )
        self.summary.db_errors = self.db.errors
        # wal_blocked: a state (WAL truncations blocked in a row) that stats and check read.
        blocked = sum(getattr(s, "blocked", 0) for s in self._maintenance.services)
        counters = {"refused": self.summary.refused, "rescued": rescued, **self.db.counters()}
        return {**counters, "wal_blocked": blocked}

    def _startup_cleanup(self, now: float) -> None:
        """Recover at once the jobs of this host's workers whose process is gone."""
        host = socket.gethostname()
        dead = [
            wid
            for wid, pid in self.db.call(self.backend.host_workers, host)
            if wid != self.id and not pid_alive(pid)
        ]
        if dead:
            report = self.db.call(self.backend.recover_workers, dead, now)
            self.summary.rescued += len(report.recovered) + len(report.exhausted)
            log.info(
                "startup cleanup: %d dead worker(s) on %s, %d job(s) recovered",
                len(dead),
                host,
                len(report.recovered) + len(report.exhausted),
            )

    def _lose(self, job_id: int) -> None:
        """Our lease on a job is gone: never start it, and expect its outcome to be refused."""
        slot = self._held.get(job_id)
        if slot is not None and self.executor.lose(slot):
            self._held.pop(job_id, None)
        log.warning("lease on job %d was lost; another worker may run it", job_id)

    def _check_cancels(self) -> None:
        ids = [i for i, s in self._held.items() if not s.cancel_requested]
        if not ids:
            return
        try:
            requested = self.db.call(self.backend.cancel_requested, ids)
        except DatabaseError as exc:
            self.db.survive("cancel check", exc, quiet=True)
            return
        for job_id in requested:
            slot = self._held.get(job_id)
            if slot is not None:
                self.executor.cancel(slot)

    def _next_deadline(self) -> float:
        if not self._any_timeout:
            return float("inf")
        return self.executor.next_deadline(self._held.values())

    def _check_timeouts(self, now: float, mono: float) -> None:
        """Fail the jobs past their timeout (the executor replaces what they block). Under
        the supervisor, killing a stuck thread is possible after all: this process stops
        gracefully and exits, so a fresh one takes its place."""
        if not self._any_timeout:
            return
        respawn = not self.recycle_on_timeout
        for slot in self.executor.expire(self._held.values(), now, mono, respawn=respawn):
            if self.recycle_on_timeout:
                log.warning(
                    "job %d ran past its timeout in a thread that cannot be interrupted; "
                    "this worker process will exit so the supervisor replaces it",
                    slot.job.id,
                )
                self.summary.recycled = True
                self._stop.graceful = True

    # -- shutdown --------------------------------------------------------------------------

    def _shutdown(self) -> None:
        """Hand back unstarted jobs, let running ones finish within the grace period, record
        everything, then stop the runners."""
        self.executor.release_unstarted(self._held.values())
        deadline = time.monotonic() + self.settings.shutdown_timeout
        while not self._stop.now and time.monotonic() < deadline:
            self._flush(self.clock())
            if not any(s.state is STARTED for s in self._held.values()):
                break
            self._wake.wait(0.05)
            self._wake.clear()
        if not self._stop.now:
            self._flush(self.clock())
        else:
            self.summary.interrupted = True
        self.executor.close()
        self._maintenance.stop()
        try:
            self.db.call(self.backend.worker_stopped, self.id, self.clock(), self._counters())
        except DatabaseError as exc:
            log.warning("could not mark worker stopped: %s", exc)
        self.summary.db_errors = self.db.errors
