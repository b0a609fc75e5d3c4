"""Tasks: a handler function plus its retry policy, registered on a Queue by ``@q.task``."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from datetime import datetime, timedelta
from typing import Any, Generic, ParamSpec, Protocol, TypedDict, TypeVar, Unpack

from .core import validate
from .core.backoff import DEFAULT_BACKOFF, Backoff
from .errors import ConfigurationError, PayloadError
from .limits import Limit

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

    def __post_init__(self) -> None:
        validate.name(self.queue, "queue")
        if self.limit is not None and not isinstance(self.limit, Limit):
            raise ConfigurationError(
                f"limit must be an errands.Limit, got {type(self.limit).__name__}"
            )
        validate.integer(self.priority, "priority", *validate.PRIORITY_RANGE)
        validate.integer(self.max_attempts, "max_attempts", 1, validate.MAX_ATTEMPTS_MAX)
        validate.integer(self.max_snoozes, "max_snoozes", 0, validate.MAX_ATTEMPTS_MAX)
        if self.timeout is not None:
            validate.duration(self.timeout, "timeout")
        validate.callable_(self.backoff, "backoff", "a callable attempt -> seconds")


@dataclass(frozen=True, slots=True)
class EnqueueOptions:
    """Per-call overrides for ``Task.with_options(...).enqueue(**kwargs)``, checked when
    given (so a mistake shows where the options are built, not at a later enqueue)."""

    queue: str | None = None
    priority: int | None = None
    run_at: datetime | float | None = None
    delay: float | timedelta | None = None
    max_attempts: int | None = None
    unique_key: str | None = None
    connection: Any = None
    after: Sequence[int] | None = None  # runs once these jobs are final (pipelines.md)
    on_upstream_failure: str = "cancel"

    def __post_init__(self) -> None:
        validate.after(self.after, self.on_upstream_failure)
        if self.queue is not None:
            validate.name(self.queue, "queue")
        if self.priority is not None:
            validate.integer(self.priority, "priority", *validate.PRIORITY_RANGE)
        if self.max_attempts is not None:
            validate.integer(self.max_attempts, "max_attempts", 1, validate.MAX_ATTEMPTS_MAX)
        if self.run_at is not None and self.delay is not None:
            raise ConfigurationError("give run_at or delay, not both")
        if self.run_at is not None:
            validate.epoch(self.run_at, "run_at")
        if self.delay is not None:
            validate.duration(self.delay, "delay", allow_zero=True)
        if self.unique_key is not None:
            validate.text(self.unique_key, "unique_key", max_bytes=validate.MAX_KEY_BYTES)

    @classmethod
    def check_names(cls, overrides: Mapping[str, Any]) -> None:
        known = {f.name for f in fields(cls)}
        unknown = sorted(k for k in overrides if k not in known)
        if unknown:
            raise ConfigurationError(
                f"with_options got unknown option(s) {', '.join(unknown)}; "
                f"use {', '.join(sorted(known))}"
            )


class EnqueueKwargs(TypedDict, total=False):
    """The per-call options of ``Queue.enqueue``, as keyword arguments."""

    queue: str | None
    priority: int | None
    run_at: datetime | float | None
    delay: float | timedelta | None
    max_attempts: int | None
    unique_key: str | None
    connection: Any
    after: Sequence[int] | None
    on_upstream_failure: str


class Enqueuer(Protocol):
    """What a Task needs to store its jobs: the Queue's two enqueue verbs, which fill in the
    options a call leaves out from the task registered under ``job_type``."""

    def enqueue(
        self, job_type: str, payload: Any = None, **options: Unpack[EnqueueKwargs]
    ) -> int: ...

    async def enqueue_async(
        self, job_type: str, payload: Any = None, **options: Unpack[EnqueueKwargs]
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
        """Per-call options: ``send_email.with_options(delay=30).enqueue(to=…)``."""
        EnqueueOptions.check_names(overrides)
        return BoundTask(self, EnqueueOptions(**overrides))


@dataclass(frozen=True, slots=True)
class BoundTask:
    task: Task[Any, Any]
    options: EnqueueOptions = field(default_factory=EnqueueOptions)

    def enqueue(self, **kwargs: Any) -> int:
        return self.task.enqueuer.enqueue(self.task.name, kwargs, **self._options())

    async def enqueue_async(self, **kwargs: Any) -> int:
        return await self.task.enqueuer.enqueue_async(self.task.name, kwargs, **self._options())

    def _options(self) -> EnqueueKwargs:
        o = self.options
        return {
            "queue": o.queue,
            "priority": o.priority,
            "run_at": o.run_at,
            "delay": o.delay,
            "max_attempts": o.max_attempts,
            "unique_key": o.unique_key,
            "connection": o.connection,
            "after": o.after,
            "on_upstream_failure": o.on_upstream_failure,
        }

    def with_options(self, **overrides: Any) -> BoundTask:
        EnqueueOptions.check_names(overrides)
        return replace(self, options=replace(self.options, **overrides))
