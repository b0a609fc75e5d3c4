"""Tasks: a handler function plus its retry policy, registered on a Queue by ``@q.task``."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar

from .backoff import DEFAULT_BACKOFF, Backoff
from .errors import ConfigurationError, PayloadError

if TYPE_CHECKING:
    from .queue import Queue

P = ParamSpec("P")
R = TypeVar("R")

DEFAULT_QUEUE = "default"
DEFAULT_MAX_ATTEMPTS = 20
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

    def __post_init__(self) -> None:
        if not self.queue or not isinstance(self.queue, str):
            raise ConfigurationError(f"queue must be a non-empty string, got {self.queue!r}")
        if self.max_attempts < 1:
            raise ConfigurationError(f"max_attempts must be >= 1, got {self.max_attempts}")
        if self.timeout is not None and self.timeout <= 0:
            raise ConfigurationError(f"timeout must be > 0 seconds, got {self.timeout}")
        if not callable(self.backoff):
            raise ConfigurationError("backoff must be a callable attempt -> seconds")


@dataclass(frozen=True, slots=True)
class EnqueueOptions:
    """Per-call overrides for ``Task.options(...).enqueue(**kwargs)``."""

    queue: str | None = None
    priority: int | None = None
    run_at: datetime | float | None = None
    delay: float | timedelta | None = None
    max_attempts: int | None = None
    unique_key: str | None = None
    connection: Any = None


class Task(Generic[P, R]):
    """A registered handler. Calling it runs the function directly (handy in tests);
    ``.enqueue(**kwargs)`` stores a job for a worker to run."""

    def __init__(self, queue: Queue, fn: Callable[P, R], name: str, options: TaskOptions) -> None:
        self.queue = queue
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
        keys = frozenset(payload)
        if keys in self._fitting_keys:
            return
        try:
            self.signature.bind(**payload)
        except TypeError as exc:
            raise PayloadError(f"payload does not fit {self.name}{self.signature}: {exc}") from None
        if len(self._fitting_keys) < 256:
            self._fitting_keys.add(keys)

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> int:
        """Enqueue a job with these keyword arguments; returns its id."""
        if args:
            raise PayloadError(
                f"{self.name}.enqueue takes keyword arguments only (they are stored as JSON), "
                f"got {len(args)} positional"
            )
        return self.queue.enqueue(self.name, dict(kwargs))

    def with_options(self, **overrides: Any) -> BoundTask:
        """Per-call options: ``send_email.with_options(delay=30).enqueue(to=…)``."""
        return BoundTask(self, EnqueueOptions(**overrides))


@dataclass(frozen=True, slots=True)
class BoundTask:
    task: Task[Any, Any]
    options: EnqueueOptions = field(default_factory=EnqueueOptions)

    def enqueue(self, **kwargs: Any) -> int:
        o = self.options
        return self.task.queue.enqueue(
            self.task.name,
            kwargs,
            queue=o.queue,
            priority=o.priority,
            run_at=o.run_at,
            delay=o.delay,
            max_attempts=o.max_attempts,
            unique_key=o.unique_key,
            connection=o.connection,
        )

    def with_options(self, **overrides: Any) -> BoundTask:
        return replace(self, options=replace(self.options, **overrides))
