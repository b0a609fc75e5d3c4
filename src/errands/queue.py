"""``errands.Queue``: the one object an application holds."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar, overload

from . import payload as payload_json
from . import periodic
from .backends import open_backend, redact
from .backends.base import CancelReport, JobFilter, NewJob, PruneProgress, PruneReport
from .backoff import Backoff
from .errors import (
    ConfigurationError,
    InvalidTransitionError,
    JobNotFoundError,
    PayloadError,
    UnknownTaskError,
)
from .maintenance import Rescuer, Service
from .periodic import PeriodicScheduler, Schedule
from .records import Attempt, EventRecord, Job, to_epoch
from .retention import Pruner
from .settings import Duration, Retention, Settings, seconds
from .states import Event, State
from .tasks import DEFAULT_QUEUE, Task, TaskOptions

F = TypeVar("F", bound=Callable[..., Any])

_NO_TASK_OPTIONS = TaskOptions()  # for types another service runs: the defaults

EnqueueItem = tuple[str, Any] | tuple[str, Any, Mapping[str, Any]]


class Queue:
    """A job queue stored in one database.

    ``Queue("app.db")`` (or ``sqlite:///app.db``) uses a SQLite file, created and migrated on
    first use; ``Queue("postgresql://…")`` uses PostgreSQL (``pip install 'errands[postgres]'``).
    See the README for every setting and its default.
    """

    def __init__(
        self,
        url: str | os.PathLike[str] = "errands.db",
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
        self.clock = clock
        self.tasks: dict[str, Task[Any, Any]] = {}
        self.schedules: dict[str, Schedule] = {}
        self._wakers: set[Callable[[], None]] = set()
        # Maintenance services the elected worker runs (rescue; prune and periodic add theirs).
        self._service_factories: list[Callable[[Queue], Service | None]] = [
            lambda q: Rescuer(q.backend, q.settings.lease_seconds),
            lambda q: PeriodicScheduler(q) if q.schedules else None,
            lambda q: Pruner(q),
        ]
        self.backend = open_backend(url, self.settings)
        self.backend.migrate()

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

    def close(self) -> None:
        self.backend.close()

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
        defaults = TaskOptions()
        options = TaskOptions(
            queue=queue,
            priority=priority,
            max_attempts=defaults.max_attempts if max_attempts is None else max_attempts,
            backoff=defaults.backoff if backoff is None else backoff,
            timeout=None if timeout is None else seconds(timeout, "timeout"),
            retry_on=tuple(retry_on),
            discard_on=tuple(discard_on),
        )

        def register(f: F) -> Task[Any, Any]:
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
        (job_id,) = self.backend.enqueue([job], now, actor=actor, connection=connection)
        if job.run_at <= now and connection is None:
            self._wake()
        return job_id

    def enqueue_many(
        self, items: Iterable[EnqueueItem], *, connection: Any = None, actor: str = "api"
    ) -> list[int]:
        """Store many jobs in one transaction: ``[(type, payload), (type, payload, {options})]``.
        Every item is checked before anything is written."""
        now = self.clock()
        jobs: list[NewJob] = []
        for n, item in enumerate(items):
            if not isinstance(item, tuple) or len(item) not in (2, 3):
                raise PayloadError(
                    f"enqueue_many item {n} must be (type, payload) or (type, payload, options), "
                    f"got {item!r:.80}"
                )
            options = dict(item[2]) if len(item) == 3 else {}
            try:
                jobs.append(self._new_job(now, item[0], item[1], **options))
            except TypeError as exc:
                raise type_error_at(n, exc) from None
        if not jobs:
            return []
        ids = self.backend.enqueue(jobs, now, actor=actor, connection=connection)
        if connection is None and any(j.run_at <= now for j in jobs):
            self._wake()
        return ids

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
                f"job type must be a non-empty string (a task name), got {job_type!r}"
            )
        task = self.tasks.get(job_type)
        if task is None and self.tasks:
            raise UnknownTaskError(
                f"no task named {job_type!r} is registered on this Queue "
                f"(known: {', '.join(sorted(self.tasks))}); register it with @q.task, or enqueue "
                "from a Queue with no tasks registered to send jobs another service runs"
            )
        if payload is None:
            payload = {}
        if task is not None:
            task.check_payload(payload)
        text = payload_json.encode(payload, max_bytes=self.settings.max_payload_bytes)
        if run_at is not None and delay is not None:
            raise ConfigurationError("give run_at or delay, not both")
        if delay is not None:
            when = now + seconds(delay, "delay", allow_zero=True)
        elif run_at is not None:
            epoch = to_epoch(run_at)
            assert epoch is not None
            when = epoch
        else:
            when = now
        opts = task.options if task is not None else _NO_TASK_OPTIONS
        prio = opts.priority if priority is None else priority
        if type(prio) is not int:
            raise ConfigurationError(f"priority must be an int (higher runs first), got {prio!r}")
        attempts = opts.max_attempts if max_attempts is None else max_attempts
        if type(attempts) is not int or attempts < 1:
            raise ConfigurationError(f"max_attempts must be an int >= 1, got {attempts!r}")
        if unique_key is not None and (not isinstance(unique_key, str) or not unique_key):
            raise ConfigurationError(f"unique_key must be a non-empty string, got {unique_key!r}")
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

    # -- reading ---------------------------------------------------------------------------

    def get(self, job_id: int) -> Job | None:
        """The job with every column as an attribute, or None."""
        return self.backend.get_job(job_id)

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
        if limit < 1:
            raise ConfigurationError(f"limit must be >= 1, got {limit}")
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
        return self.backend.attempts(job_id)

    def events(self, job_id: int) -> list[EventRecord]:
        return self.backend.events(job_id)

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
        return self.backend.ops_stats(
            self.clock() if now is None else now,
            alive_seconds=self.settings.lease_seconds,
            window=seconds(window, "window"),
            top=top,
            running_limit=running_limit,
        )

    def errors(
        self, *, top: int = 10, since: Duration = 86400.0, now: float | None = None
    ) -> list[dict[str, Any]]:
        """The most frequent error codes (with type, count and last seen) over ``since``."""
        now = self.clock() if now is None else now
        return self.backend.top_errors(now - seconds(since, "since"), top)

    def workers(self, *, now: float | None = None) -> list[dict[str, Any]]:
        """Live workers (seen within ``lease_seconds``, not stopped), newest heartbeat first —
        the same rows as ``stats()["workers"]``."""
        return self.backend.live_workers(
            self.clock() if now is None else now, self.settings.lease_seconds
        )

    def throughput(self, *, hours: int = 24, now: float | None = None) -> list[dict[str, Any]]:
        """Finished jobs per hour over the last ``hours`` hours, oldest first, one entry per hour
        (zeros included): ``{"hour": epoch of its start, "succeeded", "failed", "cancelled"}``.
        Counts rows still in the table plus the hourly rollup of pruned ones."""
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
        return self.backend.prune(
            self.clock() if now is None else now,
            dry_run=dry_run,
            batch_size=batch_size,
            progress=progress,
            should_stop=should_stop,
        )

    def vacuum(self) -> dict[str, int | None]:
        """Shrink the database file (locks it while it runs: off-peak)."""
        return self.backend.vacuum()

    # -- operator actions ------------------------------------------------------------------

    def cancel(self, job_id: int, *, actor: str = "api") -> str:
        """Cancel a queued job (→ ``cancelled``) or ask a running one to stop
        (→ ``cancel_requested``). Returns which happened."""
        report: CancelReport = self.backend.cancel([job_id], actor, self.clock())
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
        if not self.backend.retry([job_id], actor, self.clock()):
            job = self._must_get(job_id)
            raise InvalidTransitionError(
                f"job {job_id} is {job.status}; only failed or cancelled jobs can be retried"
            )

    def _must_get(self, job_id: int) -> Job:
        job = self.backend.get_job(job_id)
        if job is None:
            raise JobNotFoundError(f"no job with id {job_id}; list jobs with `errands jobs`")
        return job

    def add_service(self, factory: Callable[[Queue], Service | None]) -> None:
        """Have the elected worker also run this maintenance service (None: not needed)."""
        self._service_factories.append(factory)

    def services(self) -> list[Service]:
        """The maintenance services a worker's leader runs: rescue, periodic, prune."""
        return [s for make in self._service_factories if (s := make(self)) is not None]

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
    ) -> Any:
        """Run jobs until stopped (SIGTERM/SIGINT), or with ``burst=True`` until no job this
        worker handles is due and none is running. Returns a summary of what it did.

        ``recycle_on_timeout`` and ``supervised`` are set by ``errands worker --processes``
        for its children: exit (status 75) after a sync handler overran its timeout; ignore
        SIGINT and repeated SIGTERMs, leaving "stop now" to the supervisor."""
        from .worker import Worker

        return Worker(
            self,
            concurrency=concurrency,
            queues=queues,
            burst=burst,
            handle_signals=handle_signals,
            recycle_on_timeout=recycle_on_timeout,
            supervised=supervised,
        ).run()


def type_error_at(n: int, exc: TypeError) -> TypeError:
    """Prefix an item index to a payload error from enqueue_many."""
    cls = exc.__class__
    try:
        return cls(f"enqueue_many item {n}: {exc}")
    except TypeError:
        return exc
