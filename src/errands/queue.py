"""``errands.Queue``: the one object an application holds."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar, Unpack, overload

from .backends import forks, open_backend, redact
from .backends.base import EnqueueCall, Graduation
from .backends.verbs import Listener, ReadVerbs
from .client import pipelines, waiting
from .client.admin import MAX_BATCH as MAX_BATCH  # re-exported: the CLI's --batch-size cap
from .client.admin import Actions, Reads
from .client.declared import DeclaredOptions, GraduationWatch
from .client.enqueueing import EnqueueItem as EnqueueItem  # re-exported: enqueue_many's item type
from .client.enqueueing import Producer, call_options
from .client.flow import FlowControl
from .client.grouping import GroupCommitter
from .client.lifecycle import Lifecycle
from .client.steps import DurableSteps
from .core import payload as payload_json
from .core import schedule, validate
from .core.backoff import Backoff
from .core.options import EnqueueKwargs, EnqueueOptions
from .core.records import Job, to_datetime
from .core.schedule import Schedule
from .core.settings import Duration, Retention, Settings, seconds
from .core.states import Event
from .errors import ConfigurationError, GraduatedError
from .fair import Fair, fair_of
from .limits import Limit
from .maintenance.expirer import Expirer
from .maintenance.pruner import SERVICE_MAX_BATCHES, Pruner
from .maintenance.rescuer import Rescuer
from .maintenance.runner import Service
from .maintenance.scheduler import PeriodicScheduler, schedule_row
from .maintenance.sweeper import DepSweeper
from .maintenance.vacuum import Vacuumer
from .maintenance.wal import WalKeeper
from .middleware import Chain
from .order import order_of
from .tasks import DEFAULT_MAX_SNOOZES, DEFAULT_QUEUE, Task, TaskOptions
from .wakeups import KINDS, Wakeups, hubs, listen_for_work

if TYPE_CHECKING:
    from .worker.inputs import LiveWorker
    from .worker.loop import WorkerSummary

F = TypeVar("F", bound=Callable[..., Any])
R = TypeVar("R")
log = logging.getLogger("errands")

ENV_DB = "ERRANDS_DB"
DEFAULT_DB = "errands.db"


MAX_CONCURRENCY = 10_000  # runner threads or concurrent async handlers per worker


class Queue(Lifecycle, Reads, Actions, FlowControl, DurableSteps):
    """A job queue stored in one database.

    ``Queue("app.db")`` (or ``sqlite:///app.db``, relative; ``sqlite:////srv/app.db``, absolute)
    uses a SQLite file, created and migrated on first use; ``Queue("postgresql://…")`` uses
    PostgreSQL (``pip install 'errands[postgres]'``).
    ``Queue()`` with no URL reads ``$ERRANDS_DB``, else uses ``errands.db`` — the same rule as
    the CLI, so an application, its workers and ``errands`` commands agree on one database.
    Every setting and its default: docs/reference/settings.md.
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
        allow_graduated: bool = False,
        table_prefix: str | None = None,
        clock: Callable[[], float] | None = None,
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
        if clock is None:  # the default clock, as for every other setting left as None
            clock = time.time
        validate.callable_(clock, "clock", "a function returning unix seconds")
        self.clock = clock
        self.tasks: dict[str, Task[Any, Any]] = {}
        self.schedules: dict[str, Schedule] = {}
        self._wakers: set[Callable[[], None]] = set()
        self._middlewares: list[object] = []
        self._chain: Chain | None = None  # None until q.use(): no cost without middleware
        self._lock = threading.Lock()
        self._offload: ThreadPoolExecutor | None = None  # blocking work of async callers
        # Workers running on this Queue: close() stops them before closing anything, and a
        # close asked for while one still runs happens when the last one has stopped.
        self._workers: list[LiveWorker] = []
        self._generation = forks.generation  # which process opened it (see close)
        self._close_pending = False
        self.backend = open_backend(url, self.settings, table_prefix)
        try:
            self.backend.migrate()
        except BaseException:
            # A Queue that failed to open is never closed by its caller: release the
            # backend's connections (and a pool's threads) here, not whenever GC gets to them.
            self.backend.close()
            raise
        self._hubs = hubs(self.backend, self._wakers)
        # A SQLite file `errands graduate` moved away takes no new work: read here, then by
        # enqueue at most every 30 s, by run_worker at start. allow_graduated: open anyway.
        self.allow_graduated = validate.flag(allow_graduated, "allow_graduated")
        watch = None
        if not allow_graduated:
            graduated = self.backend.graduation()
            watch = GraduationWatch(
                self.backend.graduation, self.refuse_if_graduated, initial=graduated
            )
        self._producer = Producer(
            self.backend,
            self.tasks,
            max_payload_bytes=self.settings.max_payload_bytes,
            clock=clock,
            chain=lambda: self._chain,
            wake=self._wake,
            off_loop=self._off_loop,
            group=self._group_committer(),
            declared=DeclaredOptions(self.backend.task_types),
            refuse=watch,
        )

    def refuse_if_graduated(self, graduated: Graduation | None = None) -> None:
        """Raise GraduatedError if ``errands graduate`` moved this database's queue away (and
        it was not opened with ``allow_graduated``); ``graduated``: the mark read at open,
        else it is read now. ``run_worker`` and ``errands worker`` call it before starting."""
        if self.allow_graduated:
            return
        g = graduated or self.backend.graduation()
        if g is not None:
            when = to_datetime(g.at)
            raise GraduatedError.of(self.display_url, g.target, str(when and when.isoformat()))

    def __repr__(self) -> str:
        return f"<errands.Queue {self.display_url!r} tasks={sorted(self.tasks)}>"

    @property
    def display_url(self) -> str:
        """The database URL with any password hidden, for messages and logs."""
        return redact(self.url)

    @property
    def reads(self) -> ReadVerbs:
        """The database's read verbs (counts, searches, windows, the schedules, the workers)
        for the CLI, the dashboard and reports of your own: nothing reached through it changes
        a row. Every change is a Queue method (enqueue, retry, cancel, pause, …)."""
        return self.backend

    @property
    def table_prefix(self) -> str:
        """The prefix of errands' table names in this database ('' for none): the one
        named (``table_prefix=`` or ``?table_prefix=`` in the URL), else the one found."""
        return self.backend.prefix

    def table(self, name: str) -> str:
        """What errands' table (or index, trigger) ``name`` is called in this database:
        ``q.table("jobs")`` → ``"errands_jobs"`` under the prefix ``errands_``; for SQL of
        your own, such as docs/operations.md's."""
        return self.backend.table(name)

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
        """The middleware added with ``use``, in order."""
        return tuple(self._middlewares)

    @property
    def _execute_hooks(self) -> Chain | None:
        """The middleware chain a worker runs handlers through; None without execute hooks."""
        chain = self._chain
        return chain if chain is not None and chain.execute_hooks else None

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
        limit: Limit | None = None,
        max_snoozes: int = DEFAULT_MAX_SNOOZES,
        expires_in: Duration | None = None,
        deadline: Duration | None = None,
        fair: str | Fair | Callable[[Mapping[str, Any]], Any] | None = None,
        order: str | Callable[[Mapping[str, Any]], Any] | None = None,
        order_on_failure: str = "continue",
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
        limit: Limit | None = None,
        max_snoozes: int = DEFAULT_MAX_SNOOZES,
        expires_in: Duration | None = None,
        deadline: Duration | None = None,
        fair: str | Fair | Callable[[Mapping[str, Any]], Any] | None = None,
        order: str | Callable[[Mapping[str, Any]], Any] | None = None,
        order_on_failure: str = "continue",
    ) -> Task[Any, Any] | Callable[[F], Task[Any, Any]]:
        """Register a handler (sync or ``async def``). Its type is ``name`` or its
        ``__name__``. Use as ``@q.task`` or ``@q.task(queue=…, max_attempts=…)``."""
        if name is not None:
            validate.name(name, "task name")
        defaults = TaskOptions()
        options = TaskOptions(
            queue=queue,
            priority=priority,
            max_attempts=defaults.max_attempts if max_attempts is None else max_attempts,
            backoff=defaults.backoff if backoff is None else backoff,
            timeout=None if timeout is None else seconds(timeout, "timeout"),
            retry_on=validate.exception_types(retry_on, "retry_on"),
            discard_on=validate.exception_types(discard_on, "discard_on"),
            limit=limit,
            max_snoozes=max_snoozes,
            expires_in=None if expires_in is None else seconds(expires_in, "expires_in"),
            deadline=None if deadline is None else seconds(deadline, "deadline"),
            fair=fair_of(fair),
            order=order_of(order, order_on_failure),
        )

        def register(f: F) -> Task[Any, Any]:
            validate.callable_(f, "a task", "a function (sync or async def)")
            task_name = validate.name(name or f.__name__, "task name")
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
        a schedule with no success for ``grace`` after a tick is overdue. See errands.core.schedule.
        """

        if (cron is None) == (every is None):
            raise ConfigurationError("@q.periodic needs exactly one of cron='…' or every=seconds")
        if cron is not None:
            schedule.check_cron(cron)
        interval = None if every is None else seconds(every, "every")
        schedule.zone(timezone)
        if catch_up not in schedule.CATCH_UP:
            raise ConfigurationError(f"catch_up must be 'skip' or 'once', got {catch_up!r}")

        def register(f: F) -> Task[Any, Any]:
            task = self.task(name=name, queue=queue, **task_options)(f)
            body = {} if payload is None else payload
            task.check_payload(body)
            text = payload_json.encode(body, max_bytes=self.settings.max_payload_bytes)
            now = self.clock()
            nominal = schedule.nominal_interval(cron, interval, timezone, now)
            declared = Schedule(
                name=task.name,
                cron=cron,
                interval=interval,
                timezone=timezone,
                queue=queue,
                payload=text,
                catch_up=catch_up,
                grace=(
                    max(schedule.MIN_GRACE, 0.1 * nominal)
                    if grace is None
                    else seconds(grace, "grace")
                ),
            )
            self.schedules[task.name] = declared
            next_run = schedule.next_tick(cron, interval, timezone, now)
            self.backend.upsert_periodic(schedule_row(declared, next_run))
            return task

        return register(fn) if fn is not None else register

    # -- enqueueing ------------------------------------------------------------------------

    def enqueue(
        self,
        job_type: str,
        payload: Any = None,
        *,
        options: EnqueueOptions | None = None,
        connection: Any = None,
        actor: str = "api",
        by_hand: bool = False,
        **kwargs: Unpack[EnqueueKwargs],
    ) -> int:
        """Store one job and return its id. Committed when this returns — or, with
        ``connection=``, when the application commits that transaction (rollback: no job).
        ``by_hand=True``: an operator's enqueue (the CLI's, the admin API's), logged in the
        activity log under ``actor`` in the same transaction (an application's own is not).
        The options (``errands.EnqueueOptions``: queue, priority, run_at or delay,
        max_attempts, unique_key, after, on_upstream_failure) as keyword arguments, or as one
        ``options=`` value (keyword arguments given too replace its fields). With a
        ``unique_key`` held by a queued or running job, returns that job's id. ``after=[ids]``:
        the job waits until those jobs are final, then runs if they all succeeded (else it is
        cancelled, ``UPSTREAM:FAILED``), or whatever their outcome with
        ``on_upstream_failure="run"`` (docs/pipelines.md)."""
        batch = self._producer.one(job_type, payload, call_options(options, kwargs))
        audit = (
            None if by_hand is False else self._by_hand("enqueue", by_hand, actor, type=job_type)
        )
        return self._producer.store(batch, actor, connection, audit)[0]

    def enqueue_many(
        self, items: Iterable[EnqueueItem], *, connection: Any = None, actor: str = "api"
    ) -> list[int]:
        """Store many jobs in one transaction: ``[(type, payload), (type, payload, options)]``
        (options: a dict of enqueue's keyword arguments, or an ``errands.EnqueueOptions``).
        Every item is checked before anything is written."""
        return self._producer.store(self._producer.many(items), actor, connection)

    async def enqueue_async(
        self,
        job_type: str,
        payload: Any = None,
        *,
        options: EnqueueOptions | None = None,
        connection: Any = None,
        actor: str = "api",
        **kwargs: Unpack[EnqueueKwargs],
    ) -> int:
        """``enqueue`` for async code: the event loop never waits on the write. PostgreSQL: an
        asyncio connection pool, and ``connection=`` takes a ``psycopg.AsyncConnection`` in
        your transaction. SQLite: the write (and its fsync) runs on a dedicated thread."""
        batch = self._producer.one(job_type, payload, call_options(options, kwargs))
        return (await self._producer.store_async(batch, actor, connection))[0]

    async def enqueue_many_async(
        self, items: Iterable[EnqueueItem], *, connection: Any = None, actor: str = "api"
    ) -> list[int]:
        """``enqueue_many`` for async code (see ``enqueue_async``)."""
        return await self._producer.store_async(self._producer.many(items), actor, connection)

    # -- pipelines (pipelines.py, docs/pipelines.md) -------------------------------------

    def chain(
        self, items: Iterable[EnqueueItem], *, connection: Any = None, actor: str = "api"
    ) -> list[int]:
        """Store jobs that run one after another (``enqueue_many``'s items), in one
        transaction; a step that does not succeed cancels the rest. Returns their ids."""
        return pipelines.chain(self._producer, items, actor, connection)

    def batch(
        self, *, on_complete: tuple[Any, ...], connection: Any = None, actor: str = "api"
    ) -> pipelines.JobBatch:
        """``with q.batch(on_complete=(type, payload)) as batch: batch.enqueue(…)``: the
        members and a callback job that runs once all of them are final, whatever their
        outcome, stored in one transaction when the block exits without an exception."""
        item = pipelines.on_complete_item(on_complete)
        return pipelines.JobBatch(self._producer, item, actor, connection)

    async def _off_loop(self, fn: Callable[[], R]) -> R:
        """Run blocking work (a SQLite write and its fsync, a read) on this Queue's own small
        executor, so an event loop never waits on it."""
        return await asyncio.get_running_loop().run_in_executor(self._writer_thread(), fn)

    def _writer_thread(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._offload is None:
                # One thread: SQLite takes one writer at a time anyway, and jobs from one
                # task are written in the order it enqueued them.
                self._offload = ThreadPoolExecutor(1, thread_name_prefix="errands-async")
            return self._offload

    def _group_committer(self) -> GroupCommitter | None:
        """Concurrent enqueues share a commit where the backend asks for it (SQLite); the
        writer thread leads the groups of asyncio callers."""
        if not self.backend.group_commit:
            return None
        backend = self.backend

        def write_one(call: EnqueueCall) -> list[int]:
            return backend.enqueue(call.jobs, call.now, actor=call.actor)

        def spawn(lead: Callable[[], None]) -> None:
            # A leader resolves every call it writes, errors included: nothing to collect.
            self._writer_thread().submit(lead)

        return GroupCommitter(backend.enqueue_grouped, write_one, spawn)

    def _wake(self) -> None:
        for wake in list(self._wakers):
            wake()

    def _listen_for_work(self, on_change: Callable[[], None]) -> Listener:
        """Call ``on_change`` when work may have become due: at once on this Queue's own
        enqueues, through the database's wake-up channel on other processes'. ``close()`` the
        result to stop. Calls may be spurious (a worker re-reads what is due)."""
        return listen_for_work(self.backend, self._wakers, on_change)

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
        steps = waiting.final_job_steps(job_id, timeout, self.settings.poll_interval)
        with self.subscribe_wakeups("finished", job_ids=[job_id]) as sub:
            return waiting.wait_blocking(steps, partial(self.backend.get_job, job_id), sub)

    async def wait_async(self, job_id: int, timeout: Duration | None = None) -> Job:
        """``wait`` for async code: the event loop never blocks."""
        steps = waiting.final_job_steps(job_id, timeout, self.settings.poll_interval)
        subscribe = partial(self.subscribe_wakeups, "finished", job_ids=[job_id])
        with await self._off_loop(subscribe) as sub:
            read = partial(self._off_loop, partial(self.get, job_id))
            return await waiting.wait_async(steps, read, sub)

    def services(self) -> list[Service]:
        """The maintenance services a worker's leader runs: rescue, deps (the dependency
        sweeper), expiry, periodic, prune, the WAL, vacuum (PostgreSQL's dead tuples) — each
        given only what it uses."""
        services: list[Service] = [
            Rescuer(self.backend, self.settings.lease_seconds),
            DepSweeper(self.backend),
            Expirer(self.backend),
        ]
        if self.schedules:
            services.append(
                PeriodicScheduler(self.backend, self.schedules, self.tasks, clock=self.clock)
            )
        services.append(
            Pruner(self.backend, self.settings.retention, max_batches=SERVICE_MAX_BATCHES)
        )
        services.append(WalKeeper(self.backend))
        services.append(Vacuumer(self.backend))
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
        from .worker.loop import Worker

        validate.integer(concurrency, "concurrency", 1, MAX_CONCURRENCY)
        if queues is not None and not isinstance(queues, str):
            if not isinstance(queues, Iterable):
                raise ConfigurationError(f"queues must be a list of names, got {queues!r:.60}")
            queues = [validate.name(name, "queue") for name in queues]
        validate.flag(burst, "burst")
        self.refuse_if_graduated()
        return Worker(
            self,
            concurrency=concurrency,
            queues=queues,
            burst=burst,
            handle_signals=handle_signals,
            recycle_on_timeout=recycle_on_timeout,
            supervised=supervised,
        ).run()
