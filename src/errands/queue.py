"""``errands.Queue``: the one object an application holds."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar, overload

from . import payload as payload_json
from . import periodic, stats, validate
from .backends import open_backend, redact
from .backends.base import CancelReport, JobFilter, NewJob, PruneProgress, PruneReport
from .backoff import Backoff
from .errors import (
    ConfigurationError,
    ErrandsError,
    InvalidTransitionError,
    JobNotFoundError,
    PayloadError,
    UnknownTaskError,
    WaitTimeout,
)
from .maintenance import Rescuer, Service
from .middleware import Chain, Enqueuing, encode_headers
from .periodic import PeriodicScheduler, Schedule
from .records import Attempt, EventRecord, Job
from .retention import SERVICE_MAX_BATCHES, Pruner
from .settings import Duration, Retention, Settings, seconds
from .states import TERMINAL, Event, State
from .tasks import DEFAULT_QUEUE, Task, TaskOptions
from .wakeups import KINDS, Wakeups, hubs

if TYPE_CHECKING:
    from .worker import WorkerSummary

F = TypeVar("F", bound=Callable[..., Any])
R = TypeVar("R")
log = logging.getLogger("errands")

ENV_DB = "ERRANDS_DB"
DEFAULT_DB = "errands.db"

_NO_TASK_OPTIONS = TaskOptions()  # for types another service runs: the defaults

EnqueueItem = tuple[str, Any] | tuple[str, Any, Mapping[str, Any]]
MAX_BATCH = 1_000_000  # prune's rows per transaction
MAX_CONCURRENCY = 10_000  # runner threads or concurrent async handlers per worker


class Queue:
    """A job queue stored in one database.

    ``Queue("app.db")`` (or ``sqlite:///app.db``, relative; ``sqlite:////srv/app.db``, absolute)
    uses a SQLite file, created and migrated on first use; ``Queue("postgresql://…")`` uses
    PostgreSQL (``pip install 'errands[postgres]'``).
    ``Queue()`` with no URL reads ``$ERRANDS_DB``, else uses ``errands.db`` — the same rule as
    the CLI, so an application, its workers and ``errands`` commands agree on one database.
    See the README for every setting and its default.
    """

    def __init__(
        self,
        url: str | os.PathLike[str] | None = None,
        *,
        durability: str = "full",
        lease_seconds: Duration = 60.0,
        heartbeat_seconds: Duration | None = None,
        poll_interval: Duration = 1.0,
        shutdown_timeout: Duration = 30.0,
        busy_timeout: Duration = 5.0,
        max_payload_bytes: int = 1024 * 1024,
        max_result_bytes: int = 1024 * 1024,
        retention: Retention | Mapping[str, Duration] | None = None,
        audit: Iterable[Event | str] | None = None,
        allow_network_filesystem: bool = False,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if url is None:
            url = os.environ.get(ENV_DB) or DEFAULT_DB
        self.url = url = os.fspath(url)
        self.settings = Settings.build(
            durability=durability,
            lease_seconds=lease_seconds,
            heartbeat_seconds=heartbeat_seconds,
            poll_interval=poll_interval,
            shutdown_timeout=shutdown_timeout,
            busy_timeout=busy_timeout,
            max_payload_bytes=max_payload_bytes,
            max_result_bytes=max_result_bytes,
            retention=retention,
            audit=audit,
            allow_network_filesystem=allow_network_filesystem,
        )
        validate.callable_(clock, "clock", "a function returning unix seconds")
        self.clock = clock
        self.tasks: dict[str, Task[Any, Any]] = {}
        self.schedules: dict[str, Schedule] = {}
        self._wakers: set[Callable[[], None]] = set()
        self._middlewares: list[object] = []
        self._chain: Chain | None = None  # None until q.use(): no cost without middleware
        self._lock = threading.Lock()
        self._offload: ThreadPoolExecutor | None = None  # blocking work of async callers
        self.backend = open_backend(url, self.settings)
        self.backend.migrate()
        self._hubs = hubs(self.backend, self._wakers)

    def __repr__(self) -> str:
        return f"<errands.Queue {self.display_url!r} tasks={sorted(self.tasks)}>"

    @property
    def display_url(self) -> str:
        """The database URL with any password hidden, for messages and logs."""
        return redact(self.url)

    def __enter__(self) -> Queue:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Queue:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def close(self) -> None:
        """Close the database connections, listeners and any async pool."""
        for hub in self._hubs.values():
            hub.close()
        with self._lock:
            offload, self._offload = self._offload, None
        if offload is not None:
            offload.shutdown(wait=True)
        self.backend.close()

    async def aclose(self) -> None:
        """``close()`` from async code: closes the async pool on this event loop, then the
        rest without blocking the loop."""
        aclose = getattr(self.backend, "aclose", None)
        if aclose is not None:
            await aclose()
        await asyncio.to_thread(self.close)

    # -- middleware --------------------------------------------------------------------------

    def use(self, middleware: object) -> None:
        """Register middleware: an object with ``enqueue(job)`` and/or ``execute(attempt)``
        hooks (see errands.middleware and docs/observing.md). The first registered wraps the
        others. Register before starting workers: a running worker keeps the hooks it began
        with."""
        if not callable(getattr(middleware, "enqueue", None)) and not callable(
            getattr(middleware, "execute", None)
        ):
            raise ConfigurationError(
                f"{middleware!r} has neither an enqueue(job) nor an execute(attempt) method; "
                "see errands.Middleware"
            )
        chain = Chain([*self._middlewares, middleware])  # checks the hooks first
        self._middlewares.append(middleware)
        self._chain = chain

    @property
    def middleware(self) -> tuple[object, ...]:
        return tuple(self._middlewares)

    # -- registering tasks -----------------------------------------------------------------

    @overload
    def task(self, fn: F, /) -> Task[Any, Any]: ...
    @overload
    def task(
        self,
        fn: None = None,
        /,
        *,
        name: str | None = None,
        queue: str = DEFAULT_QUEUE,
        priority: int = 0,
        max_attempts: int | None = None,
        backoff: Backoff | None = None,
        timeout: Duration | None = None,
        retry_on: Sequence[type[BaseException]] = (),
        discard_on: Sequence[type[BaseException]] = (),
    ) -> Callable[[F], Task[Any, Any]]: ...

    def task(
        self,
        fn: F | None = None,
        /,
        *,
        name: str | None = None,
        queue: str = DEFAULT_QUEUE,
        priority: int = 0,
        max_attempts: int | None = None,
        backoff: Backoff | None = None,
        timeout: Duration | None = None,
        retry_on: Sequence[type[BaseException]] = (),
        discard_on: Sequence[type[BaseException]] = (),
    ) -> Task[Any, Any] | Callable[[F], Task[Any, Any]]:
        """Register a handler (sync or ``async def``). Its type is ``name`` or its
        ``__name__``. Use as ``@q.task`` or ``@q.task(queue=…, max_attempts=…)``."""
        if name is not None:
            validate.text(name, "task name")
        defaults = TaskOptions()
        options = TaskOptions(
            queue=queue,
            priority=priority,
            max_attempts=defaults.max_attempts if max_attempts is None else max_attempts,
            backoff=defaults.backoff if backoff is None else backoff,
            timeout=None if timeout is None else seconds(timeout, "timeout"),
            retry_on=validate.exception_types(retry_on, "retry_on"),
            discard_on=validate.exception_types(discard_on, "discard_on"),
        )

        def register(f: F) -> Task[Any, Any]:
            validate.callable_(f, "a task", "a function (sync or async def)")
            task_name = name or f.__name__
            if task_name in self.tasks and self.tasks[task_name].fn is not f:
                raise ConfigurationError(
                    f"a task named {task_name!r} is already registered on this Queue; "
                    "give one of them @q.task(name=…)"
                )
            t: Task[Any, Any] = Task(self, f, task_name, options)
            self.tasks[task_name] = t
            return t

        return register(fn) if fn is not None else register

    @overload
    def periodic(self, fn: F, /) -> Task[Any, Any]: ...
    @overload
    def periodic(
        self,
        fn: None = None,
        /,
        *,
        cron: str | None = None,
        every: Duration | None = None,
        name: str | None = None,
        queue: str = DEFAULT_QUEUE,
        payload: Mapping[str, Any] | None = None,
        timezone: str = "UTC",
        catch_up: str = "skip",
        grace: Duration | None = None,
        **task_options: Any,
    ) -> Callable[[F], Task[Any, Any]]: ...

    def periodic(
        self,
        fn: F | None = None,
        /,
        *,
        cron: str | None = None,
        every: Duration | None = None,
        name: str | None = None,
        queue: str = DEFAULT_QUEUE,
        payload: Mapping[str, Any] | None = None,
        timezone: str = "UTC",
        catch_up: str = "skip",
        grace: Duration | None = None,
        **task_options: Any,
    ) -> Task[Any, Any] | Callable[[F], Task[Any, Any]]:
        """Register a task that runs on a schedule: ``cron="0 9 * * *"`` (in ``timezone``) or
        ``every=`` seconds/timedelta. Each tick enqueues exactly once however many schedulers
        run; ``catch_up`` ("skip" or "once") says what happens to ticks missed while none ran;
        a schedule with no success for ``grace`` after a tick is overdue. See errands.periodic.
        """

        def register(f: F) -> Task[Any, Any]:
            return periodic.register(
                self,
                f,
                cron=cron,
                every=every,
                name=name,
                queue=queue,
                payload=payload,
                timezone=timezone,
                catch_up=catch_up,
                grace=grace,
                task_options=task_options,
            )

        return register(fn) if fn is not None else register

    # -- enqueueing ------------------------------------------------------------------------

    def enqueue(
        self,
        job_type: str,
        payload: Any = None,
        *,
        queue: str | None = None,
        priority: int | None = None,
        run_at: datetime | float | None = None,
        delay: Duration | None = None,
        max_attempts: int | None = None,
        unique_key: str | None = None,
        connection: Any = None,
        actor: str = "api",
    ) -> int:
        """Store one job and return its id. Committed when this returns — or, with
        ``connection=``, when the application commits that transaction (rollback: no job).
        With a ``unique_key`` held by a queued or running job, returns that job's id."""
        now = self.clock()
        job = self._new_job(
            now,
            job_type,
            payload,
            queue=queue,
            priority=priority,
            run_at=run_at,
            delay=delay,
            max_attempts=max_attempts,
            unique_key=unique_key,
        )
        (job_id,) = self._store([job], now, actor, connection)
        return job_id

    def enqueue_many(
        self, items: Iterable[EnqueueItem], *, connection: Any = None, actor: str = "api"
    ) -> list[int]:
        """Store many jobs in one transaction: ``[(type, payload), (type, payload, {options})]``.
        Every item is checked before anything is written."""
        now = self.clock()
        jobs = self._new_jobs(now, items)
        return self._store(jobs, now, actor, connection) if jobs else []

    async def enqueue_async(
        self,
        job_type: str,
        payload: Any = None,
        *,
        queue: str | None = None,
        priority: int | None = None,
        run_at: datetime | float | None = None,
        delay: Duration | None = None,
        max_attempts: int | None = None,
        unique_key: str | None = None,
        connection: Any = None,
        actor: str = "api",
    ) -> int:
        """``enqueue`` for async code: the event loop never waits on the write. PostgreSQL: an
        asyncio connection pool, and ``connection=`` takes a ``psycopg.AsyncConnection`` in
        your transaction. SQLite: the write (and its fsync) runs on a dedicated thread."""
        now = self.clock()
        job = self._new_job(
            now,
            job_type,
            payload,
            queue=queue,
            priority=priority,
            run_at=run_at,
            delay=delay,
            max_attempts=max_attempts,
            unique_key=unique_key,
        )
        (job_id,) = await self._store_async([job], now, actor, connection)
        return job_id

    async def enqueue_many_async(
        self, items: Iterable[EnqueueItem], *, connection: Any = None, actor: str = "api"
    ) -> list[int]:
        """``enqueue_many`` for async code (see ``enqueue_async``)."""
        now = self.clock()
        jobs = self._new_jobs(now, items)
        return await self._store_async(jobs, now, actor, connection) if jobs else []

    def _new_jobs(self, now: float, items: Iterable[EnqueueItem]) -> list[NewJob]:
        jobs: list[NewJob] = []
        if isinstance(items, str | bytes | Mapping) or not isinstance(items, Iterable):
            raise ConfigurationError(
                "enqueue_many takes a list of (type, payload) or (type, payload, options) "
                f"tuples, got {type(items).__name__}"
            )
        for n, item in enumerate(items):
            if not isinstance(item, tuple) or len(item) not in (2, 3):
                raise PayloadError(
                    f"enqueue_many item {n} must be (type, payload) or (type, payload, options), "
                    f"got {item!r:.80}"
                )
            try:
                options = _item_options(item[2]) if len(item) == 3 else {}
                jobs.append(self._new_job(now, item[0], item[1], **options))
            except ErrandsError as exc:
                raise _at_item(n, exc) from None
            except TypeError as exc:
                raise type_error_at(n, exc) from None
        return jobs

    # One write path for the blocking and the async producers: checks and middleware run in
    # _hooked (before) and _stored (after); only the write itself differs.

    def _store(self, jobs: list[NewJob], now: float, actor: str, connection: Any) -> list[int]:
        jobs, after = self._hooked(jobs, actor)
        try:
            ids = self.backend.enqueue(jobs, now, actor=actor, connection=connection)
        except BaseException as exc:
            if after is not None:
                after(None, exc)
            raise
        return self._stored(jobs, ids, now, connection, after)

    async def _store_async(
        self, jobs: list[NewJob], now: float, actor: str, connection: Any
    ) -> list[int]:
        jobs, after = self._hooked(jobs, actor)
        native = getattr(self.backend, "enqueue_async", None)
        try:
            if native is not None:
                ids: list[int] = await native(jobs, now, actor=actor, connection=connection)
            elif connection is not None:
                # SQLite, in the application's transaction: no commit (no fsync) happens here,
                # and its connection belongs to this thread.
                ids = self.backend.enqueue(jobs, now, actor=actor, connection=connection)
            else:
                write = partial(self.backend.enqueue, jobs, now, actor=actor)
                ids = await self._off_loop(write)
        except BaseException as exc:
            if after is not None:
                after(None, exc)
            raise
        return self._stored(jobs, ids, now, connection, after)

    def _hooked(
        self, jobs: list[NewJob], actor: str
    ) -> tuple[list[NewJob], Callable[[list[int] | None, BaseException | None], None] | None]:
        """Run enqueue middleware's before-parts; returns the jobs with the headers they set,
        and what to call after the write (None without middleware)."""
        chain = self._chain
        if chain is None or not chain.enqueue_hooks:
            return jobs, None
        infos = [
            Enqueuing(
                j.type,
                j.queue,
                json.loads(j.payload),
                j.priority,
                j.run_at,
                j.max_attempts,
                j.unique_key,
                actor,
            )
            for j in jobs
        ]
        around = chain.enqueuing(infos)
        next(around)
        hooked = [replace(j, headers=_headers(info)) for j, info in zip(jobs, infos, strict=True)]

        def after(ids: list[int] | None, error: BaseException | None) -> None:
            for n, info in enumerate(infos):
                info.id, info.error = (None if ids is None else ids[n]), error
            next(around, None)

        return hooked, after

    def _stored(
        self,
        jobs: list[NewJob],
        ids: list[int],
        now: float,
        connection: Any,
        after: Callable[[list[int] | None, BaseException | None], None] | None,
    ) -> list[int]:
        if after is not None:
            after(ids, None)
        if connection is None and any(j.run_at <= now for j in jobs):
            self._wake()
        return ids

    async def _off_loop(self, fn: Callable[[], R]) -> R:
        """Run blocking work (a SQLite write and its fsync, a read) on this Queue's own small
        executor, so an event loop never waits on it."""
        with self._lock:
            if self._offload is None:
                # One thread: SQLite takes one writer at a time anyway, and jobs from one
                # task are written in the order it enqueued them.
                self._offload = ThreadPoolExecutor(1, thread_name_prefix="errands-async")
            offload = self._offload
        return await asyncio.get_running_loop().run_in_executor(offload, fn)

    def _new_job(
        self,
        now: float,
        job_type: str,
        payload: Any,
        *,
        queue: str | None = None,
        priority: int | None = None,
        run_at: datetime | float | None = None,
        delay: Duration | None = None,
        max_attempts: int | None = None,
        unique_key: str | None = None,
    ) -> NewJob:
        if not isinstance(job_type, str) or not job_type:
            raise UnknownTaskError(
                f"job type must be a non-empty string (a task name), got {job_type!r:.60}"
            )
        task = self.tasks.get(job_type)
        if task is None and self.tasks:
            raise UnknownTaskError(
                f"no task named {job_type!r:.80} is registered on this Queue "
                f"(known: {', '.join(sorted(self.tasks))}); register it with @q.task, or enqueue "
                "from a Queue with no tasks registered to send jobs another service runs"
            )
        if task is None:
            validate.text(job_type, "job type")
        if payload is None:
            payload = {}
        if task is not None:
            task.check_payload(payload)
        if run_at is not None and delay is not None:
            raise ConfigurationError("give run_at or delay, not both")
        if delay is not None:
            when = validate.when(now, delay)
        elif run_at is not None:
            when = validate.epoch(run_at, "run_at")
        else:
            when = now
        opts = task.options if task is not None else _NO_TASK_OPTIONS
        prio = (
            opts.priority
            if priority is None
            else validate.integer(priority, "priority", *validate.PRIORITY_RANGE)
        )
        attempts = (
            opts.max_attempts
            if max_attempts is None
            else validate.integer(max_attempts, "max_attempts", 1, validate.MAX_ATTEMPTS_MAX)
        )
        if unique_key is not None:
            validate.text(unique_key, "unique_key", max_bytes=validate.MAX_KEY_BYTES)
        if queue is not None:
            validate.text(queue, "queue")
        text = payload_json.encode(payload, max_bytes=self.settings.max_payload_bytes)
        return NewJob(
            type=job_type,
            payload=text,
            queue=opts.queue if queue is None else queue,
            priority=prio,
            run_at=when,
            max_attempts=attempts,
            unique_key=unique_key,
        )

    def _wake(self) -> None:
        for wake in list(self._wakers):
            wake()

    # -- waiting for an outcome -------------------------------------------------------------

    def subscribe_wakeups(
        self, kind: str = "finished", *, job_ids: Iterable[int] | None = None
    ) -> Wakeups:
        """Subscribe to this Queue's wake-ups: ``"finished"`` (jobs reached a final state) or
        ``"enqueued"`` (work may be due), optionally only those naming ``job_ids``. Returns a
        ``Wakeups`` whose ``wait(timeout)`` / ``await wait_async(timeout)`` return True on a
        wake-up. Wake-ups may be spurious: re-read what you wait for."""
        if kind not in KINDS:
            raise ConfigurationError(f"unknown wake-up kind {kind!r}; use one of {KINDS}")
        return self._hubs[kind].add(job_ids)

    def wait(self, job_id: int, timeout: Duration | None = None) -> Job:
        """Block until the job is ``succeeded``, ``failed`` or ``cancelled`` and return it (a
        job that will be retried is not final). Woken by the database's notifications, from
        any process; ``timeout`` (seconds) raises ``WaitTimeout``, leaving the job as it is."""
        steps = self._wait_steps(job_id, timeout)
        with self.subscribe_wakeups("finished", job_ids=[job_id]) as sub:
            try:
                step = next(steps)
                while True:
                    if step is None:
                        step = steps.send(self.backend.get_job(job_id))
                    else:
                        sub.wait(step)
                        step = steps.send(None)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]

    async def wait_async(self, job_id: int, timeout: Duration | None = None) -> Job:
        """``wait`` for async code: the event loop never blocks."""
        steps = self._wait_steps(job_id, timeout)
        subscribe = partial(self.subscribe_wakeups, "finished", job_ids=[job_id])
        with await self._off_loop(subscribe) as sub:
            try:
                step = next(steps)
                while True:
                    if step is None:
                        step = steps.send(await self._off_loop(partial(self.get, job_id)))
                    else:
                        await sub.wait_async(step)
                        step = steps.send(None)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]

    def _wait_steps(
        self, job_id: int, timeout: Duration | None
    ) -> Generator[float | None, Job | None, Job]:
        """The waiting logic once for both drivers: yields None to be sent the job as read
        now, or seconds to sleep until a wake-up (a fallback poll of ``poll_interval`` covers
        a lost notification)."""
        limit = None if timeout is None else seconds(timeout, "timeout", allow_zero=True)
        started = time.monotonic()
        while True:
            job = yield None
            if job is None:
                raise JobNotFoundError(f"no job with id {job_id}; list jobs with `errands jobs`")
            if job.status in TERMINAL:
                return job
            pause = self.settings.poll_interval
            if limit is not None:
                left = limit - (time.monotonic() - started)
                if left <= 0:
                    raise WaitTimeout(
                        f"job {job_id} is still {job.status} after {limit:g}s; wait longer "
                        f"(timeout=…) or look at it with `errands show {job_id}`"
                    )
                pause = min(pause, left)
            yield pause

    # -- reading ---------------------------------------------------------------------------

    def get(self, job_id: int) -> Job | None:
        """The job with every column as an attribute, or None."""
        return self.backend.get_job(validate.job_id(job_id))

    def jobs(
        self,
        *,
        status: str | None = None,
        type: str | None = None,
        queue: str | None = None,
        error_code: str | None = None,
        limit: int = 100,
        before_id: int | None = None,
    ) -> list[Job]:
        """Jobs matching the filters, newest first; page with ``before_id``."""
        if status is not None and status not in {s.value for s in State}:
            raise ConfigurationError(
                f"unknown status {status!r}; use one of {', '.join(s.value for s in State)}"
            )
        validate.integer(limit, "limit", 1, validate.INT64_MAX)
        if before_id is not None:
            validate.job_id(before_id, "before_id")
        for label, value in (("type", type), ("queue", queue), ("error_code", error_code)):
            if value is not None and not isinstance(value, str):
                raise ConfigurationError(f"{label} must be a string, got {value!r:.60}")
        return self.backend.list_jobs(
            JobFilter(
                status=status,
                type=type,
                queue=queue,
                error_code=error_code,
                before_id=before_id,
                limit=limit,
            )
        )

    def attempts(self, job_id: int) -> list[Attempt]:
        return self.backend.attempts(validate.job_id(job_id))

    def events(self, job_id: int) -> list[EventRecord]:
        return self.backend.events(validate.job_id(job_id))

    def traceback(self, attempt: Attempt) -> str | None:
        """The full traceback of a failed attempt (kept outside the row)."""
        return None if attempt.traceback_ref is None else self.backend.blob(attempt.traceback_ref)

    def stats(
        self,
        *,
        window: Duration = 86400.0,
        top: int = 10,
        running_limit: int = 10,
        now: float | None = None,
    ) -> dict[str, Any]:
        """The five questions in one JSON-ready object: ``counts`` (every state), counts
        ``by_queue_type``, ``oldest_running`` (with worker liveness), ``oldest_due``,
        ``retries`` and ``top_errors`` over ``window``, ``last_hour`` throughput and wait/run
        p50/p95, ``unhandled_types``, ``periodic_overdue`` and live ``workers``."""
        return stats.collect(
            self.backend,
            self.clock() if now is None else validate.epoch(now, "now"),
            alive_seconds=self.settings.lease_seconds,
            window=seconds(window, "window"),
            top=validate.integer(top, "top", 1, validate.INT32_MAX),
            running_limit=validate.integer(running_limit, "running_limit", 1, validate.INT32_MAX),
        )

    def errors(
        self, *, top: int = 10, since: Duration = 86400.0, now: float | None = None
    ) -> list[dict[str, Any]]:
        """The most frequent error codes (with type, count and last seen) over ``since``."""
        now = self.clock() if now is None else validate.epoch(now, "now")
        since_s = seconds(since, "since")
        return self.backend.top_errors(
            now - since_s, validate.integer(top, "top", 1, validate.INT32_MAX)
        )

    def workers(self, *, now: float | None = None) -> list[dict[str, Any]]:
        """Live workers (seen within ``lease_seconds``, not stopped), newest heartbeat first —
        the same rows as ``stats()["workers"]``."""
        return self.backend.live_workers(
            self.clock() if now is None else now, self.settings.lease_seconds
        )

    def throughput(self, *, hours: int = 24, now: float | None = None) -> list[dict[str, Any]]:
        """Finished jobs per hour over the last ``hours`` hours, oldest first, one entry per hour
        (zeros included): ``{"hour": epoch of its start, "succeeded", "failed", "cancelled"}``.
        Pruned jobs included: hours the trigger-kept minute figures cover come from them,
        older hours from the rows still in the table plus the hourly rollup of pruned ones."""
        if type(hours) is not int or not 1 <= hours <= 24 * 31:
            raise ConfigurationError(f"hours must be a whole number from 1 to 744, got {hours!r}")
        now = self.clock() if now is None else now
        first = (now // 3600.0 - (hours - 1)) * 3600.0
        series = {
            first + 3600.0 * i: {
                "hour": first + 3600.0 * i,
                "succeeded": 0,
                "failed": 0,
                "cancelled": 0,
            }
            for i in range(hours)
        }
        for hour, outcome, n in self.backend.hourly_outcomes(first):
            slot = series.get(float(hour))
            if slot is not None and outcome in slot:
                slot[outcome] += n
        return list(series.values())

    def prune(
        self,
        now: float | None = None,
        dry_run: bool = False,
        batch_size: int = 1000,
        *,
        progress: Callable[[PruneProgress], None] | None = None,
        should_stop: Callable[[], bool] | None = None,
    ) -> PruneReport:
        """Delete finished jobs past ``retention`` (rolled up first), ``batch_size`` rows per
        transaction; rerunnable and interruptible (``should_stop``). See errands.retention."""
        pruner = Pruner(
            self.backend,
            self.settings.retention,
            batch_size=validate.integer(batch_size, "batch_size", 1, MAX_BATCH),
            progress=progress,
            should_stop=should_stop,
        )
        return pruner.run_once(
            self.clock() if now is None else validate.epoch(now, "now"),
            dry_run=validate.flag(dry_run, "dry_run"),
        )

    def vacuum(self) -> dict[str, int | None]:
        """Shrink the database file (locks it while it runs: off-peak)."""
        return self.backend.vacuum()

    # -- operator actions ------------------------------------------------------------------

    def cancel(self, job_id: int, *, actor: str = "api") -> str:
        """Cancel a queued job (→ ``cancelled``) or ask a running one to stop
        (→ ``cancel_requested``). Returns which happened."""
        report: CancelReport = self.backend.cancel([validate.job_id(job_id)], actor, self.clock())
        if report.cancelled:
            return "cancelled"
        if report.requested:
            return "cancel_requested"
        job = self._must_get(job_id)
        raise InvalidTransitionError(
            f"job {job_id} is {job.status}; only queued or running jobs can be cancelled"
        )

    def retry(self, job_id: int, *, actor: str = "api") -> None:
        """Run a failed or cancelled job again now, with at least one more attempt."""
        if not self.backend.retry([validate.job_id(job_id)], actor, self.clock()):
            job = self._must_get(job_id)
            raise InvalidTransitionError(
                f"job {job_id} is {job.status}; only failed or cancelled jobs can be retried"
            )

    def _must_get(self, job_id: int) -> Job:
        job = self.backend.get_job(job_id)
        if job is None:
            raise JobNotFoundError(f"no job with id {job_id}; list jobs with `errands jobs`")
        return job

    def services(self) -> list[Service]:
        """The maintenance services a worker's leader runs: rescue, periodic, prune — each
        given only what it uses."""
        services: list[Service] = [Rescuer(self.backend, self.settings.lease_seconds)]
        if self.schedules:
            services.append(
                PeriodicScheduler(self.backend, self.schedules, self.tasks, clock=self.clock)
            )
        services.append(
            Pruner(self.backend, self.settings.retention, max_batches=SERVICE_MAX_BATCHES)
        )
        return services

    # -- running ---------------------------------------------------------------------------

    def run_worker(
        self,
        *,
        concurrency: int = 8,
        queues: Sequence[str] | None = None,
        burst: bool = False,
        handle_signals: bool = True,
        recycle_on_timeout: bool = False,
        supervised: bool = False,
    ) -> WorkerSummary:
        """Run jobs until stopped (SIGTERM/SIGINT), or with ``burst=True`` until no job this
        worker handles is due and none is running. Returns a summary of what it did.

        ``recycle_on_timeout`` and ``supervised`` are set by ``errands worker --processes``
        for its children: exit (status 75) after a sync handler overran its timeout; ignore
        SIGINT and repeated SIGTERMs, leaving "stop now" to the supervisor."""
        from .worker import Worker

        validate.integer(concurrency, "concurrency", 1, MAX_CONCURRENCY)
        if queues is not None and not isinstance(queues, str):
            if not isinstance(queues, Iterable):
                raise ConfigurationError(f"queues must be a list of names, got {queues!r:.60}")
            queues = [validate.text(name, "queue") for name in queues]
        validate.flag(burst, "burst")
        return Worker(
            self,
            concurrency=concurrency,
            queues=queues,
            burst=burst,
            handle_signals=handle_signals,
            recycle_on_timeout=recycle_on_timeout,
            supervised=supervised,
        ).run()


_ITEM_OPTIONS = frozenset({"queue", "priority", "run_at", "delay", "max_attempts", "unique_key"})


def _item_options(options: Any) -> dict[str, Any]:
    """An enqueue_many item's options: a mapping of enqueue's keyword arguments."""
    if not isinstance(options, Mapping):
        raise ConfigurationError(
            f"options must be a dict of enqueue options, got {type(options).__name__}"
        )
    unknown = sorted(str(k) for k in options if k not in _ITEM_OPTIONS)
    if unknown:
        raise ConfigurationError(
            f"unknown option(s) {', '.join(unknown)}; use {', '.join(sorted(_ITEM_OPTIONS))} "
            "(connection= and actor= go to enqueue_many itself)"
        )
    return dict(options)


def _at_item(n: int, exc: ErrandsError) -> ErrandsError:
    """The same error class, its message prefixed with the item's index."""
    try:
        return type(exc)(f"enqueue_many item {n}: {exc}")
    except TypeError:
        return exc


def type_error_at(n: int, exc: TypeError) -> TypeError:
    """Prefix an item index to a payload error from enqueue_many."""
    cls = exc.__class__
    try:
        return cls(f"enqueue_many item {n}: {exc}")
    except TypeError:
        return exc


def _headers(info: Enqueuing) -> str | None:
    try:
        return encode_headers(info.headers)
    except TypeError as exc:
        log.error(
            "enqueue middleware set bad job headers (%s); the job is stored without them", exc
        )
        return None
