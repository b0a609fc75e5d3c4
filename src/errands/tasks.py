"""Tasks: a handler function plus its retry policy, registered on a Queue by ``@q.task``."""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from itertools import repeat
from typing import Any, Generic, ParamSpec, Protocol, TypeVar, Unpack, cast

from .backends.base import NewJob, TaskTypeRow
from .core import payload as payload_json
from .core import validate
from .core.backoff import DEFAULT_BACKOFF, Backoff
from .core.options import DEFAULT as DEFAULT_OPTIONS
from .core.options import EnqueueKwargs, EnqueueOptions
from .core.timerules import TimeRules
from .errors import ConfigurationError, ErrandsError, PayloadError, at_item
from .fair import Fair
from .limits import Limit
from .order import Order

P = ParamSpec("P")
R = TypeVar("R")

DEFAULT_QUEUE = "default"
DEFAULT_MAX_ATTEMPTS = 20
# A handler that snoozes forever (raise Snooze(0) in a loop) would add an attempt row each
# time without end; past this many starts its next snooze fails the job (SNOOZE:LIMIT).
DEFAULT_MAX_SNOOZES = 1000
CTX_PARAM = "ctx"


@dataclass(frozen=True, slots=True)
class TaskOptions:
    queue: str = DEFAULT_QUEUE
    priority: int = 0
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    backoff: Backoff = DEFAULT_BACKOFF
    timeout: float | None = None
    retry_on: tuple[type[BaseException], ...] = ()
    discard_on: tuple[type[BaseException], ...] = ()
    limit: Limit | None = None  # flow control (errands.Limit): its jobs carry its key/group
    max_snoozes: int = DEFAULT_MAX_SNOOZES
    expires_in: float | None = None  # seconds (docs/flow-control.md "Time rules")
    deadline: float | None = None  # seconds from creation (the same section)
    fair: Fair | None = None  # fair share (errands.Fair): its jobs' group is their value
    order: Order | None = None  # order per key: its jobs' group is their value

    def __post_init__(self) -> None:
        validate.name(self.queue, "queue")
        if self.limit is not None and not isinstance(self.limit, Limit):
            raise ConfigurationError(
                f"limit must be an errands.Limit, got {type(self.limit).__name__}"
            )
        if self.fair is not None and self.limit is not None and self.limit.group != self.fair.field:
            # One group per job: the fair value is the limit's group (backends/fair.py).
            raise ConfigurationError(
                f"fair={self.fair.name!r} with Limit({self.limit.key!r}, group="
                f"{self.limit.group!r}): a fair task's limit must be per the same field; "
                f"give the Limit group={self.fair.name!r}"
            )
        if self.order is not None:
            self._check_order(self.order)
        validate.integer(self.priority, "priority", *validate.PRIORITY_RANGE)
        validate.integer(self.max_attempts, "max_attempts", 1, validate.MAX_ATTEMPTS_MAX)
        validate.integer(self.max_snoozes, "max_snoozes", 0, validate.MAX_ATTEMPTS_MAX)
        if self.timeout is not None:
            validate.duration(self.timeout, "timeout")
        if self.expires_in is not None:
            validate.duration(self.expires_in, "expires_in")
        if self.deadline is not None:
            validate.duration(self.deadline, "deadline")
        validate.callable_(self.backoff, "backoff", "a callable attempt -> seconds")

    def _check_order(self, order: Order) -> None:
        # One group per job: the ordered value must be the limit's group and the fair value.
        if self.limit is not None and self.limit.group != order.field:
            raise ConfigurationError(
                f"order={order.name!r} with Limit({self.limit.key!r}, group="
                f"{self.limit.group!r}): one job has one group, so an ordered task's limit "
                f"must be per the same field; give the Limit group={order.name!r}"
            )
        if self.fair is not None and self.fair.field != order.field:
            raise ConfigurationError(
                f"order={order.name!r} with fair={self.fair.name!r}: one job has one group, "
                "so order and fair share must name the same field"
            )

    # Every job is built by these two (an enqueue, an enqueue_many, a periodic tick), so an
    # option or a limit column is resolved in one place.

    def job(
        self,
        job_type: str,
        text: str,
        payload: Any,
        now: float,
        o: EnqueueOptions = DEFAULT_OPTIONS,
    ) -> NewJob:
        """One job of these defaults with the options ``o`` (checked when it was built) over
        them, for a checked ``payload`` (its ``text``, or "" when the caller's one-pass
        encode fills it in)."""
        if o is DEFAULT_OPTIONS:
            job = NewJob(job_type, text, self.queue, self.priority, now, self.max_attempts)
            job.rules = self._rules
        else:
            if o.debounce is not None:  # seconds once checked; the first enqueue's run_at
                when = now + min(cast(float, o.debounce), cast(float, o.max_wait or math.inf))
            elif o.delay is not None:
                when = validate.when(now, o.delay)
            elif o.run_at is not None:
                when = cast(float, o.run_at)  # unix seconds once checked
            else:
                when = now
            job = NewJob(
                job_type,
                text,
                self.queue if o.queue is None else o.queue,
                self.priority if o.priority is None else o.priority,
                when,
                self.max_attempts if o.max_attempts is None else o.max_attempts,
                o.unique_key,
            )
            expires_in = self.expires_in if o.expires_in is None else o.expires_in
            deadline = self.deadline if o.deadline is None else o.deadline
            if (
                o.unique_for is not None
                or o.debounce is not None
                or expires_in is not None
                or deadline is not None
            ):
                job.rules = TimeRules(  # seconds once checked
                    cast(float | None, o.unique_for),
                    cast(float | None, o.debounce),
                    cast(float | None, o.max_wait),
                    cast(float | None, expires_in),
                    cast(float | None, deadline),
                )
        limit = self.limit
        if limit is not None:  # its key and this payload's group, written with the row
            if not text:
                payload_json.check(payload)  # the group is read from a checked payload
            job.limit_key = limit.key
            job.limit_group = limit.group_of(payload)
        elif self.fair is not None:  # stored as a group of its own key (errands/fair.py)
            if not text:
                payload_json.check(payload)
            job.limit_key = key = self.fair.key()
            job.limit_group = self.fair.value_of(payload, key)
        elif self.order is not None:  # stored as a group of its own key (errands/order.py)
            if not text:
                payload_json.check(payload)
            job.limit_key = key = self.order.key()
            job.limit_group = self.order.value_of(payload, key)
        return job

    @property
    def _rules(self) -> TimeRules | None:
        """The time rules of this task's jobs enqueued without options (None: none)."""
        if self.expires_in is None and self.deadline is None:
            return None
        return TimeRules(expires_in=self.expires_in, deadline=self.deadline)

    def fair_key(self) -> str | None:
        """The limit key this task's fair turns are kept under (None: not fair)."""
        if self.fair is None:
            return None
        return self.fair.key() if self.limit is None else self.limit.key

    def order_key(self) -> str | None:
        """The limit key this task's jobs keep their order under (None: not ordered)."""
        if self.order is None:
            return None
        if self.limit is not None:
            return self.limit.key
        return self.order.key() if self.fair is None else self.fair.key()

    def jobs(
        self, job_type: str, texts: list[str], payloads: list[Any], now: float
    ) -> list[NewJob]:
        """``job`` with no options for each of many checked payloads (their ``texts``),
        built in C (``map``) but for the limit's group."""
        many = len(texts)
        jobs = list(
            map(
                NewJob,
                repeat(job_type, many),
                texts,
                repeat(self.queue, many),
                repeat(self.priority, many),
                repeat(now, many),
                repeat(self.max_attempts, many),
            )
        )
        rules = self._rules
        if rules is not None:
            for job in jobs:
                job.rules = rules
        limit = self.limit
        if limit is not None:
            for n, (job, payload) in enumerate(zip(jobs, payloads, strict=True)):
                job.limit_key = limit.key
                try:
                    job.limit_group = limit.group_of(payload)
                except ErrandsError as exc:
                    raise at_item(n, exc) from None
        elif self.fair is not None:
            fair, key = self.fair, self.fair.key()
            for n, (job, payload) in enumerate(zip(jobs, payloads, strict=True)):
                job.limit_key = key
                try:
                    job.limit_group = fair.value_of(payload, key)
                except ErrandsError as exc:
                    raise at_item(n, exc) from None
        elif self.order is not None:
            order, key = self.order, self.order.key()
            for n, (job, payload) in enumerate(zip(jobs, payloads, strict=True)):
                job.limit_key = key
                try:
                    job.limit_group = order.value_of(payload, key)
                except ErrandsError as exc:
                    raise at_item(n, exc) from None
        return jobs


class Enqueuer(Protocol):
    """What a Task needs to store its jobs: the Queue's two enqueue verbs, which fill in the
    options a call leaves out from the task registered under ``job_type``."""

    def enqueue(
        self,
        job_type: str,
        payload: Any = None,
        *,
        options: EnqueueOptions | None = None,
        connection: Any = None,
        **kwargs: Unpack[EnqueueKwargs],
    ) -> int: ...

    async def enqueue_async(
        self,
        job_type: str,
        payload: Any = None,
        *,
        options: EnqueueOptions | None = None,
        connection: Any = None,
        **kwargs: Unpack[EnqueueKwargs],
    ) -> int: ...


class Task(Generic[P, R]):
    """A registered handler. Calling it runs the function directly (handy in tests);
    ``.enqueue(**kwargs)`` stores a job for a worker to run through ``enqueuer`` (the Queue
    it is registered on)."""

    def __init__(
        self, enqueuer: Enqueuer, fn: Callable[P, R], name: str, options: TaskOptions
    ) -> None:
        self.enqueuer = enqueuer
        self.fn = fn
        self.name = name
        self.options = options
        self.is_async = inspect.iscoroutinefunction(fn)
        signature = inspect.signature(fn)
        self.wants_ctx = CTX_PARAM in signature.parameters
        # The signature a payload must fit: everything but ctx.
        self.signature = signature.replace(
            parameters=[p for n, p in signature.parameters.items() if n != CTX_PARAM]
        )
        for p in self.signature.parameters.values():
            if p.kind in (p.POSITIONAL_ONLY, p.VAR_POSITIONAL):
                raise ConfigurationError(
                    f"task {name!r}: parameter {p.name!r} is positional-only; payloads are "
                    "passed as keyword arguments, so make it a normal parameter"
                )
        self.__name__ = name
        self.__doc__ = fn.__doc__
        # Whether keyword arguments bind depends only on their names: remember the key sets
        # that fit, so enqueueing many jobs of one shape binds the signature once.
        self._fitting_keys: set[frozenset[str]] = set()

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<errands.Task {self.name} queue={self.options.queue}>"

    def check_payload(self, payload: Any) -> None:
        """Raise PayloadError if ``payload`` cannot be passed to this handler."""
        if not isinstance(payload, Mapping):
            raise PayloadError(
                f"task {self.name!r} takes keyword arguments, so its payload must be a JSON "
                f"object (dict), got {type(payload).__name__}"
            )
        if self.wants_ctx and CTX_PARAM in payload:
            raise self.ctx_clash()
        keys = frozenset(payload)
        if keys in self._fitting_keys:
            return
        try:
            self.signature.bind(**payload)
        except TypeError as exc:
            why = validate.unbound_keys(self.signature, keys) or str(exc)
            raise PayloadError(f"payload does not fit {self.name}{self.signature}: {why}") from None
        if len(self._fitting_keys) < 256:
            self._fitting_keys.add(keys)

    def ctx_clash(self) -> PayloadError:
        """A payload key named ``ctx`` for a handler that takes ``ctx``: one rule wherever it
        is seen — refused at enqueue by a producer that knows the task, failed with
        INVALID_INPUT:PAYLOAD by the worker when it was enqueued by name (never silently
        replaced by the job context)."""
        return PayloadError(
            f"payload key {CTX_PARAM!r} is reserved: task {self.name!r} takes {CTX_PARAM} (the "
            "job context the worker passes); rename that key"
        )

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> int:
        """Enqueue a job with these keyword arguments; returns its id."""
        if args:
            raise PayloadError(
                f"{self.name}.enqueue takes keyword arguments only (they are stored as JSON), "
                f"got {len(args)} positional"
            )
        return self.enqueuer.enqueue(self.name, dict(kwargs))

    async def enqueue_async(self, *args: P.args, **kwargs: P.kwargs) -> int:
        """``enqueue`` for async code (see ``Queue.enqueue_async``)."""
        if args:
            raise PayloadError(
                f"{self.name}.enqueue_async takes keyword arguments only (they are stored as "
                f"JSON), got {len(args)} positional"
            )
        return await self.enqueuer.enqueue_async(self.name, dict(kwargs))

    def with_options(self, **overrides: Any) -> BoundTask:
        """Per-call options: ``send_email.with_options(delay=30).enqueue(to=…)``; any
        ``errands.EnqueueOptions`` field, and ``connection=`` (the application's
        transaction)."""
        return BoundTask(self).with_options(**overrides)


@dataclass(frozen=True, slots=True)
class BoundTask:
    """A task with per-call options (``Task.with_options``): one checked
    ``EnqueueOptions`` value and the connection to enqueue in, carried to the Queue."""

    task: Task[Any, Any]
    options: EnqueueOptions = DEFAULT_OPTIONS
    connection: Any = None

    def enqueue(self, **kwargs: Any) -> int:
        return self.task.enqueuer.enqueue(
            self.task.name, kwargs, options=self.options, connection=self.connection
        )

    async def enqueue_async(self, **kwargs: Any) -> int:
        return await self.task.enqueuer.enqueue_async(
            self.task.name, kwargs, options=self.options, connection=self.connection
        )

    def with_options(self, **overrides: Any) -> BoundTask:
        connection = overrides.pop("connection", self.connection)
        return replace(
            self,
            options=self.options.merged(overrides, "with_options"),
            connection=connection,
        )


def declared_rows(tasks: Mapping[str, Task[Any, Any]], worker_id: str) -> list[TaskTypeRow]:
    """What a worker declares (table ``task_types``): one row per task it runs, the options
    a producer without that task then gives its jobs."""
    return [
        TaskTypeRow(
            type=name,
            queue=t.options.queue,
            priority=t.options.priority,
            max_attempts=t.options.max_attempts,
            timeout_seconds=t.options.timeout,
            options=_declared_options(t.options),
            declared_by=worker_id,
        )
        for name, t in sorted(tasks.items())
    ]


def _declared_options(options: TaskOptions) -> dict[str, Any]:
    # What tools without the app read back: `errands check`, which keys a failed head blocks;
    # `errands fair` and a standalone dashboard, the fair keys before their first turn.
    declared: dict[str, Any] = {}
    fair_key = options.fair_key()
    if fair_key is not None:
        declared["fair_key"] = fair_key
    key = options.order_key()
    if key is not None and options.order is not None:
        declared.update(order_key=key, order_on_failure=options.order.on_failure)
    return declared
