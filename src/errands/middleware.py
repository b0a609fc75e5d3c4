"""Middleware: one small interface through which an application observes and wraps enqueueing
and execution (tracing, error reporting, log fields, metrics).

A middleware is any object registered with ``q.use(mw)`` that has an ``enqueue(job)`` and/or
an ``execute(attempt)`` method (subclassing ``errands.Middleware`` is optional). Each method is
either a plain function (it runs before the operation) or a generator that yields once: the code
before ``yield`` runs before, the code after runs after, with the result filled in
(``job.id``; ``attempt.outcome``, ``error_code``, ``exception``…). A method may also return a
context manager. The same middleware serves ``enqueue`` and ``enqueue_async``, and sync and
``async def`` handlers alike: hooks are plain code, run on the caller's thread or event loop
(enqueue) and on the handler's thread or event-loop task (execute), in the handler's context,
so a span made current before ``yield`` is the parent of the handler's own spans.

Order: middlewares wrap in registration order — the first registered is outermost (its
"before" runs first and its "after" last). Guarantees: a hook that raises is logged once (logger
``errands``, with its traceback) and skipped; it never changes a job's outcome, never stops the
operation, and the other middlewares still run. See docs/observing.md.
"""

from __future__ import annotations

import inspect
import json
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .backends.base import Cancelled, ClaimedJob, Failed, Outcome, Retried, Succeeded
from .errors import ConfigurationError

if TYPE_CHECKING:
    from .context import JobContext

log = logging.getLogger("errands")


class Middleware:
    """Optional base class: override ``enqueue`` and/or ``execute`` (see the module doc).

    ``yield`` once in either to wrap the operation; return without yielding to only run
    before it."""

    def enqueue(self, job: Enqueuing) -> Any:
        """Called as each job is enqueued, before it is written; ``yield`` once to wrap it."""
        return None

    def execute(self, attempt: Execution) -> Any:
        """Called around each attempt in the worker; ``yield`` once to wrap the handler."""
        return None


@dataclass(slots=True)
class Enqueuing:
    """A job being enqueued, as enqueue middleware sees it. ``headers`` may be changed before
    ``yield``: it is stored with the job (``jobs.headers``) and handed to execute middleware on
    every attempt. After ``yield``: ``id`` is set, or ``error`` if the write failed."""

    type: str
    queue: str
    payload: Any
    priority: int
    run_at: float
    max_attempts: int
    unique_key: str | None
    actor: str
    headers: dict[str, str] = field(default_factory=dict)
    id: int | None = None
    error: BaseException | None = None


@dataclass(slots=True)
class Execution:
    """One attempt of a job, as execute middleware sees it. After ``yield``, ``outcome`` is
    ``"succeeded"``, ``"retrying"`` (failed, another attempt scheduled), ``"failed"`` (final),
    ``"cancelled"`` or ``"interrupted"`` (a hard shutdown stopped it; its lease recovers it);
    failures carry ``error_code``, ``error_detail`` and, when the handler raised, ``exception``.
    The outcome is written to the database just after, in the worker's next batch."""

    job_id: int
    type: str
    queue: str
    attempt: int
    max_attempts: int
    worker_id: str
    headers: dict[str, str]
    payload: str  # the JSON text the handler's arguments are decoded from
    outcome: str | None = None
    error_code: str | None = None
    error_detail: str | None = None
    exception: BaseException | None = None
    retry_at: float | None = None


def _overrides(mw: object, name: str) -> Callable[[Any], Any] | None:
    """The middleware's hook, unless it is missing or Middleware's no-op."""
    hook = getattr(mw, name, None)
    if hook is None or getattr(type(mw), name, None) is getattr(Middleware, name):
        return None
    if not callable(hook):
        raise ConfigurationError(f"{mw!r}.{name} must be a method, got {type(hook).__name__}")
    if inspect.iscoroutinefunction(hook) or inspect.isasyncgenfunction(hook):
        raise ConfigurationError(
            f"{type(mw).__name__}.{name} is async; hooks are plain functions or generators "
            "(they run on the handler's thread or event loop alike): drop the `async`"
        )
    return hook  # type: ignore[no-any-return]


def _enter(hook: Callable[[Any], Any], info: Any, what: str) -> Any:
    """Run a hook's "before" part; returns what must be resumed after (or None)."""
    try:
        opened = hook(info)
        if inspect.isgenerator(opened):
            next(opened)
        elif hasattr(opened, "__enter__") and hasattr(opened, "__exit__"):
            opened.__enter__()
        else:
            return None
        return opened
    except StopIteration:
        return None  # a generator that returned before yielding: nothing to resume
    except Exception:
        _report(hook, what)
        return None


def _exit(hook: Callable[[Any], Any], opened: Any, what: str) -> None:
    try:
        if inspect.isgenerator(opened):
            try:
                next(opened)
            except StopIteration:
                return
            opened.close()
            log.error("middleware hook %s yielded more than once during %s; ignored", hook, what)
        else:
            opened.__exit__(None, None, None)
    except Exception:
        _report(hook, what)


def _report(hook: Callable[[Any], Any], what: str) -> None:
    log.error(
        "middleware hook %s raised during %s; ignored (the job is unaffected)",
        getattr(hook, "__qualname__", hook),
        what,
        exc_info=True,
    )


class Chain:
    """The registered middlewares' hooks, in order. Built only when some are registered, so a
    Queue without middleware pays nothing on enqueue or execution."""

    def __init__(self, middlewares: Sequence[object]) -> None:
        self.enqueue_hooks = [h for m in middlewares if (h := _overrides(m, "enqueue"))]
        self.execute_hooks = [h for m in middlewares if (h := _overrides(m, "execute"))]

    # -- enqueue ---------------------------------------------------------------------------

    def enqueuing(self, jobs: Sequence[Enqueuing]) -> Iterator[None]:
        """Wrap a write of ``jobs``: before-parts, then (after the caller's ``yield``) the
        after-parts, in reverse order. Used as ``gen = …; next(gen); write; next(gen, None)``
        by both the blocking and the asyncio enqueue."""
        opened: list[tuple[Callable[[Any], Any], Any, str]] = []
        for info in jobs:
            what = f"enqueue of {info.type!r}"
            for hook in self.enqueue_hooks:
                resume = _enter(hook, info, what)
                if resume is not None:
                    opened.append((hook, resume, what))
        yield
        for hook, resume, what in reversed(opened):
            _exit(hook, resume, what)

    # -- execute ---------------------------------------------------------------------------

    def begin(self, job: ClaimedJob, worker_id: str) -> tuple[Execution, list[Any]]:
        info = Execution(
            job_id=job.id,
            type=job.type,
            queue=job.queue,
            attempt=job.attempt,
            max_attempts=job.max_attempts,
            worker_id=worker_id,
            headers=decode_headers(job.headers),
            payload=job.payload,
        )
        what = f"job {job.id} attempt {job.attempt}"
        opened = []
        for hook in self.execute_hooks:
            resume = _enter(hook, info, what)
            if resume is not None:
                opened.append((hook, resume))
        return info, opened

    def end(
        self, state: tuple[Execution, list[Any]], outcome: Outcome | None, ctx: JobContext | None
    ) -> None:
        info, opened = state
        describe(info, outcome, completed=ctx is not None and ctx.completed)
        what = f"job {info.job_id} attempt {info.attempt}"
        for hook, resume in reversed(opened):
            _exit(hook, resume, what)


def describe(info: Execution, outcome: Outcome | None, *, completed: bool) -> None:
    """Fill an Execution in from the outcome the worker is about to record."""
    if isinstance(outcome, Succeeded) or (outcome is None and completed):
        info.outcome = "succeeded"
    elif isinstance(outcome, Failed | Retried):
        info.outcome = "failed" if isinstance(outcome, Failed) else "retrying"
        info.error_code, info.error_detail = outcome.error_code, outcome.error_detail
        info.exception = outcome.exception
        info.retry_at = outcome.retry_at if isinstance(outcome, Retried) else None
    elif isinstance(outcome, Cancelled):
        info.outcome = "cancelled"
        info.error_code, info.error_detail = outcome.error_code, outcome.error_detail
    else:
        info.outcome = "interrupted"


def encode_headers(headers: dict[str, str]) -> str | None:
    if not headers:
        return None
    for key, value in headers.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError(f"job headers must map str to str, got {key!r}: {value!r}")
    return json.dumps(headers, separators=(",", ":"), sort_keys=True)


def decode_headers(text: str | None) -> dict[str, str]:
    if not text:
        return {}
    value = json.loads(text)
    return value if isinstance(value, dict) else {}
