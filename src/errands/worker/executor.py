"""The worker's executor: runs the handlers of the jobs the control loop holds.

Sync handlers run on ``concurrency`` runner threads; ``async def`` handlers on one event loop
thread, at most ``concurrency`` at a time. Each finished handler's outcome goes to ``done``
(and ``wake`` is set) for the control loop to write in its next batch; the executor itself
never touches the database.

Timeouts: an async handler is cancelled by its own loop at its deadline. A sync handler cannot
be interrupted: past its timeout the attempt is failed, its thread is left to finish (its
result dropped) and replaced. An async handler that never awaits blocks its loop, so its
deadline cannot fire: one still running ``ASYNC_WEDGE_GRACE`` past it is failed the same way
and the loop set aside for a fresh one.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import enum
import logging
import os
import queue as stdqueue
import sys
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..backends import forks
from ..backends.base import ClaimedJob, Outcome, Released
from ..context import JobContext
from ..errors import JobError, Suspended
from ..tasks import Task
from . import execution
from . import log as worker_log

if TYPE_CHECKING:
    from ..middleware import Chain

log = logging.getLogger("errands.worker")

# An async handler still running this long past its timeout is blocking the event loop (the
# loop would have cancelled it at its deadline): it is failed and the loop replaced.
ASYNC_WEDGE_GRACE = 1.0


class SlotState(enum.Enum):
    """Where a held job is. buffered → started → done; buffered → released (shutdown) or lost
    (lease gone); started → abandoned (past its timeout: its late result is dropped)."""

    BUFFERED = "buffered"  # claimed, waiting for a runner or the event loop
    STARTED = "started"  # its handler is running
    DONE = "done"  # its handler returned; the outcome waits in ``done``
    RELEASED = "released"  # handed back unstarted at shutdown
    LOST = "lost"  # its lease is gone before it started: never started
    ABANDONED = "abandoned"  # failed past its timeout while the handler still ran


# Module-level aliases: the runners compare states per job.
BUFFERED, STARTED, DONE = SlotState.BUFFERED, SlotState.STARTED, SlotState.DONE
RELEASED, LOST, ABANDONED = SlotState.RELEASED, SlotState.LOST, SlotState.ABANDONED


@dataclass(slots=True)
class Slot:
    """One held job: what the control loop claimed and the executor runs."""

    job: ClaimedJob
    task: Task[Any, Any]
    ctx: JobContext | None = None
    state: SlotState = BUFFERED
    started_at: float = 0.0  # wall clock: stored as the attempt's start
    begun: float = 0.0  # monotonic: run time and deadline
    deadline: float | None = None  # monotonic
    cancel_requested: bool = False
    async_task: asyncio.Task[Any] | None = None
    hooks: Any = None  # execute middleware resumed when the attempt ends (errands.middleware)
    timed_out: Outcome | None = None  # what was recorded for an abandoned attempt
    progress: tuple[float, str | None] | None = None  # ctx.progress() not yet written
    progress_written: float = -1e9  # monotonic: when this attempt's progress was last written
    start_written: bool = False  # a rate-limited attempt's start is in its window's rows


# (slot, its outcome — None when completed in the handler's transaction or shut down hard —,
# seconds the handler ran)
Finished = tuple[Slot, Outcome | None, float]


class Executor:
    def __init__(
        self,
        *,
        concurrency: int,
        worker_id: str,
        clock: Callable[[], float],
        monotonic: Callable[[], float],
        hooks: Chain | None,
        max_result_bytes: int | None,
        wake: threading.Event,
        start_within: float = float("inf"),
    ) -> None:
        self.concurrency = concurrency
        # How long after its claim a rate-limited job may still start (the lease): its claim
        # counted it in the rate's window as starting by then at the latest (backends/flow.py).
        self.start_within = start_within
        self.worker_id = worker_id
        self.clock = clock
        self.monotonic = monotonic
        self.hooks = hooks
        self.max_result_bytes = max_result_bytes
        self.wake = wake
        # Outcomes of finished handlers, oldest first, for the control loop to record.
        self.done: collections.deque[Finished] = collections.deque()
        self._lock = threading.Lock()  # slot state changes: runner threads vs control thread
        self._inbox: stdqueue.SimpleQueue[Slot | None] = stdqueue.SimpleQueue()
        self._runners: list[threading.Thread] = []
        self._extra_runners = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: threading.Thread | None = None
        self._sem: asyncio.Semaphore | None = None
        # Event loops replaced because a handler blocked them: closed at shutdown if they
        # ever come free.
        self._wedged: list[tuple[asyncio.AbstractEventLoop, threading.Thread | None]] = []
        self._async_tasks: set[asyncio.Task[None]] = set()  # asyncio keeps only weak refs
        self._closing = False
        # The process the runners belong to: a handler's os.fork() leaves a copy of one of
        # them in the child, which must run nothing more.
        self._generation = forks.generation

    # -- what the control loop asks ---------------------------------------------------------

    def start(self, *, sync: bool) -> None:
        """Start the runner threads if any task is sync (the event loop starts on demand)."""
        if sync:
            for _ in range(self.concurrency):
                self._spawn_runner()

    def submit(self, slot: Slot) -> None:
        if slot.task.is_async:
            loop = self._ensure_loop()
            assert self._sem is not None
            # The coroutine is made on the loop's own thread, when it gets there: one handed
            # over to a loop that stops first would otherwise die "never awaited".
            loop.call_soon_threadsafe(self._start_async, slot, self._sem)
        else:
            self._inbox.put(slot)

    def lose(self, slot: Slot) -> bool:
        """The lease on a buffered job is gone: never start it. False if it already started."""
        with self._lock:
            if slot.state != BUFFERED:
                return False
            slot.state = LOST
            return True

    def release_unstarted(self, slots: Iterable[Slot]) -> int:
        """Shutdown: hand back every job not started yet (its outcome goes to ``done``)."""
        n = 0
        with self._lock:
            for slot in slots:
                if slot.state == BUFFERED:
                    slot.state = RELEASED
                    self.done.append((slot, Released(slot.job.id, slot.job.attempt), 0.0))
                    n += 1
        return n

    def cancel(self, slot: Slot) -> None:
        """Someone asked to cancel this job: the handler sees ``ctx.cancelled``; an async one
        gets CancelledError at its ``await``."""
        slot.cancel_requested = True
        if slot.async_task is not None:
            slot.async_task.get_loop().call_soon_threadsafe(slot.async_task.cancel)

    def next_deadline(self, slots: Iterable[Slot]) -> float:
        """When the control loop should look at timeouts again (monotonic)."""
        # An async job's own loop enforces its deadline; the control thread looks only once
        # the grace is over (waking at the deadline itself would spin until the loop acts).
        deadlines = [
            s.deadline + (ASYNC_WEDGE_GRACE if s.task.is_async else 0.0)
            for s in slots
            if s.deadline is not None and s.state == STARTED
        ]
        return min(deadlines, default=float("inf"))

    def expire(
        self, slots: Iterable[Slot], now: float, mono: float, *, respawn: bool
    ) -> list[Slot]:
        """Fail every started job past its timeout (TIMEOUT:JOB, outcome to ``done``) that its
        own loop did not end; returns them. Their late results are dropped. A stuck sync
        handler's thread is replaced if ``respawn``; a blocked event loop always is."""
        expired: list[Slot] = []
        slots = list(slots)
        for slot in slots:
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
            self.done.append((slot, timed_out, mono - slot.begun))
            expired.append(slot)
            if wedged:
                log.warning(
                    "async job %d is blocking the event loop past its timeout (it never "
                    "awaits); failed it and moved new async work to a fresh event loop",
                    slot.job.id,
                )
                self._replace_loop(slot, slots)
            elif respawn:
                self._spawn_runner()
        return expired

    def owns_current_thread(self) -> bool:
        """Whether the calling thread runs handlers here (a runner or an event loop)."""
        me = threading.current_thread()
        return (
            me in self._runners
            or me is self._loop_thread
            or any(me is thread for _, thread in self._wedged)
        )

    def close(self) -> None:
        """Stop the runners and the event loop(s). A sync handler still running is left to
        end on its thread; async ones still pending are cancelled as their loop closes (their
        jobs' leases recover them, as they would have before)."""
        self._closing = True
        for _ in self._runners:
            self._inbox.put(None)
        if self._loop is not None:
            _close_loop(self._loop, self._loop_thread)
        for loop, thread in self._wedged:
            _close_loop(loop, thread, wait=0.1)

    # -- running handlers ------------------------------------------------------------------

    def _begin(self, slot: Slot) -> bool:
        if forks.generation != self._generation:
            return False  # a handler forked: the child starts nothing (see _leave_child)
        now = self.clock()
        claimed = slot.job.claimed_at
        late = claimed is not None and now > claimed + self.start_within
        with self._lock:
            if slot.state != BUFFERED:
                return False
            if late:  # its rate's windows no longer count it: hand it back, never start it
                slot.state = RELEASED
                self.done.append((slot, Released(slot.job.id, slot.job.attempt), 0.0))
            else:
                # Set before the state: the control thread writes a started rate-limited
                # job's start (Worker._heartbeat). Never before its claim, whatever the clock
                # did since: its window was counted from the claim on (backends/flow.py).
                slot.started_at = now if claimed is None else max(now, claimed)
                slot.state = STARTED
        if late:
            self.wake.set()
            return False
        slot.begun = self.monotonic()
        if log.isEnabledFor(logging.DEBUG):  # --verbose: one line per job started
            worker_log.started(slot.job, self.worker_id)
        timeout = slot.task.options.timeout
        if timeout is not None:
            slot.deadline = slot.begun + timeout
        if self.hooks is not None:  # on the handler's thread / task, so it shares its context
            slot.hooks = self.hooks.begin(slot.job, self.worker_id)
        return True

    def _end(self, slot: Slot, outcome: Outcome | None) -> None:
        if forks.generation != self._generation:
            _leave_child(slot)
        with self._lock:
            abandoned = slot.state != STARTED
            if not abandoned:
                slot.state = DONE
        if slot.hooks is not None and self.hooks is not None:
            self.hooks.end(slot.hooks, slot.timed_out if abandoned else outcome, slot.ctx)
        if abandoned:
            return  # abandoned after a timeout: its outcome was already recorded
        self.done.append((slot, outcome, self.monotonic() - slot.begun))
        # is_set() takes no lock: only the first of a burst of finishing jobs pays for set().
        if not self.wake.is_set():
            self.wake.set()

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

    def _run_sync(self, slot: Slot) -> Outcome | None:
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
            if slot.cancel_requested and isinstance(exc, Suspended):
                return execution.cancelled(job, started)  # asked to stop: no sleep or wait
            return execution.failed(task, job, started, self.clock(), exc)
        return self._returned(slot, result)

    def _returned(self, slot: Slot, result: Any) -> Outcome | None:
        """The outcome of a handler that returned, sync or async: none if it completed its job
        itself (``complete_in``, in the application's transaction), a cancellation if one was
        requested meanwhile, otherwise its success."""
        if slot.ctx is not None and slot.ctx.completed:
            return None
        if slot.cancel_requested:
            return execution.cancelled(slot.job, slot.started_at)
        return execution.succeeded(slot.job, slot.started_at, result, self.max_result_bytes)

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

    def _replace_loop(self, slot: Slot, slots: Iterable[Slot]) -> None:
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
        for other in slots:
            if other.state == BUFFERED and other.task.is_async:
                self.submit(other)

    def _start_async(self, slot: Slot, sem: asyncio.Semaphore) -> None:
        if self._closing:
            return  # reached after close(): the job was handed back, never start it
        task = asyncio.get_running_loop().create_task(self._run_async(slot, sem))
        self._async_tasks.add(task)
        task.add_done_callback(self._async_tasks.discard)

    async def _run_async(self, slot: Slot, sem: asyncio.Semaphore) -> None:
        async with sem:
            if not self._begin(slot):
                return
            slot.async_task = asyncio.current_task()
            self._end(slot, await self._await_handler(slot))

    async def _await_handler(self, slot: Slot) -> Outcome | None:
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
            if slot.cancel_requested and isinstance(exc, Suspended):
                return execution.cancelled(job, started)
            return execution.failed(task, job, started, self.clock(), exc)
        return self._returned(slot, result)


def _leave_child(slot: Slot) -> None:
    """A handler forked and returned in the child: the child holds a copy of this worker
    whose jobs, leases and connections are the parent's. It records nothing, starts nothing
    and does not linger: it exits here, running no cleanup that could touch what it shares
    with the parent (inherited connections are never closed)."""
    log.warning(
        "job %d's handler forked and returned in the child (pid %d): the child runs nothing "
        "of errands and exits; end forked children yourself with os._exit()",
        slot.job.id,
        os.getpid(),
    )
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(0)


def _run_loop(loop: asyncio.AbstractEventLoop) -> None:
    # The thread closes its own loop once stopped: a loop replaced because a handler blocked
    # it stops only when that handler returns, long after the worker stopped waiting for it.
    try:
        loop.run_forever()
    finally:
        try:
            _cancel_pending(loop)
        finally:
            loop.close()


def _cancel_pending(loop: asyncio.AbstractEventLoop, wait: float = 1.0) -> None:
    """Cancel what is still pending on a stopped loop (jobs waiting for a turn, a handler past
    the shutdown grace: their leases recover them) and let them unwind briefly, so closing
    the loop destroys no pending task (asyncio's "Task was destroyed but it is pending")."""
    tasks = asyncio.all_tasks(loop)
    for task in tasks:
        task.cancel()
    if tasks:
        loop.run_until_complete(asyncio.wait(tasks, timeout=wait))


def _close_loop(
    loop: asyncio.AbstractEventLoop, thread: threading.Thread | None, wait: float = 5.0
) -> None:
    """Stop an async handlers' loop; its thread then closes it (an unclosed loop leaks its
    selector and self-pipe sockets: a ResourceWarning every time a worker with async tasks
    returns). A loop a handler still blocks closes whenever that handler returns."""
    loop.call_soon_threadsafe(loop.stop)
    if thread is not None:
        thread.join(timeout=wait)
