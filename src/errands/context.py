"""What a handler sees of its own job when it takes a ``ctx`` parameter."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from .core import validate
from .core.steps import seconds_of, wake_time

if TYPE_CHECKING:
    from .backends.base import ClaimedJob
    from .core.records import Job


class Lease(Protocol):
    """What ``ctx`` needs from whoever holds the job's lease (the worker): all it can do with
    the attempt it runs."""

    @property
    def cancel_requested(self) -> bool: ...

    def heartbeat(self) -> bool: ...

    def complete(self, connection: Any, result: Any) -> None: ...

    def progress(self, fraction: float, message: str | None) -> None: ...

    def upstream(self) -> list[Job]: ...

    def journal(self, *, is_async: bool | None = None) -> Durable: ...


class Durable(Protocol):
    """This run's durable calls (worker/durable.py: Journal)."""

    step_key: str | None

    def step(self, name: str, fn: Callable[..., Any], args: Any, kwargs: Any, conn: Any) -> Any: ...

    async def step_async(
        self, name: str, fn: Callable[..., Any], args: Any, kwargs: Any, conn: Any
    ) -> Any: ...

    def sleep_until(self, wake: float, name: str) -> None: ...

    def now(self) -> float: ...

    def wait_for(self, name: str, timeout: float | None) -> Any: ...


class JobContext:
    """``ctx``: the running job's id and attempt, cancellation, heartbeats and
    transactional completion."""

    __slots__ = (
        "_lease",
        "attempt",
        "completed",
        "job_id",
        "max_attempts",
        "queue",
        "type",
    )

    def __init__(self, lease: Lease, job: ClaimedJob) -> None:
        self._lease = lease
        self.job_id = job.id
        self.attempt = job.attempt
        self.max_attempts = job.max_attempts
        self.type = job.type
        self.queue = job.queue
        self.completed = False

    def __repr__(self) -> str:
        return f"<JobContext job={self.job_id} attempt={self.attempt} type={self.type}>"

    @property
    def cancelled(self) -> bool:
        """True once someone asked to cancel this job: stop work and return (or raise).
        A job whose cancel was requested ends ``cancelled`` whatever the handler does next."""
        return self._lease.cancel_requested

    def heartbeat(self) -> bool:
        """Extend this attempt's lease now. False means the lease was lost (the job was
        recovered and may run elsewhere): stop and do not write results."""
        return self._lease.heartbeat()

    def progress(self, fraction: float, message: str | None = None) -> None:
        """Store this attempt's progress on the job (``fraction`` from 0 to 1, and a short
        message), shown by ``errands show``, ``errands jobs`` and the API. Cheap to call
        often: at most one write a second, the latest value written with the next heartbeat
        (or before the attempt's outcome), and no event row. A value that could not be
        stored (not 0-1, NaN, a message with a NUL or a lone surrogate) raises ValueError
        here (``ConfigurationError``); the message is kept to 200 characters."""
        self._lease.progress(*validate.progress(fraction, message))

    def upstream(self) -> list[Job]:
        """The jobs this one was enqueued after (``after=``, a chain's previous step, a
        batch's members), in id order, with their status and ``result``: one query. Empty
        for a job enqueued without dependencies. (A pruned upstream is no longer listed.)"""
        return self._lease.upstream()

    def complete(self, *, connection: Any, result: Any = None) -> None:
        """Mark this job succeeded inside ``connection``'s open transaction (same database),
        fenced like every transition: your writes and the completion commit together or not
        at all. After this the worker records nothing more for the attempt.

        Raises ``InvalidTransitionError`` if this attempt no longer holds the job."""
        self._lease.complete(connection, result)
        self.completed = True

    # -- durable calls (docs/durable-steps.md) ---------------------------------------------

    def step(
        self,
        name: str,
        fn: Callable[..., Any],
        /,
        *args: Any,
        connection: Any = None,
        **kwargs: Any,
    ) -> Any:
        """Run ``fn(*args, **kwargs)`` once for this job: its JSON result is recorded, and
        every later run of the job (a retry, a recovered crash, a resume after a sleep or a
        signal) gets the recorded result back without calling ``fn``. With ``connection=``
        (the same database as errands, outside any transaction) errands begins a
        transaction on it, calls ``fn``, records the step and commits: ``fn``'s writes and
        the record together or not at all. A step that raises is not recorded."""
        journal = self._lease.journal(is_async=False)
        return journal.step(name, fn, args, kwargs, connection)

    async def step_async(
        self,
        name: str,
        fn: Callable[..., Any],
        /,
        *args: Any,
        connection: Any = None,
        **kwargs: Any,
    ) -> Any:
        """``ctx.step`` for async handlers: ``fn`` may be a coroutine function."""
        journal = self._lease.journal(is_async=True)
        return await journal.step_async(name, fn, args, kwargs, connection)

    @property
    def step_key(self) -> str:
        """The step running now (inside ``fn``): a key stable for this job and step across
        runs, to hand an external API as its idempotency key."""
        key = self._lease.journal().step_key
        if key is None:
            raise RuntimeError("ctx.step_key is the running step's key: read it inside fn")
        return key

    def sleep(self, duration: float | timedelta, *, name: str = "sleep") -> None:
        """Come back in ``duration`` (seconds or a timedelta) without holding a worker: the
        wake time is recorded when first reached, the run ends, and the job is queued for
        then; a later run returns here at once once the time has passed."""
        journal = self._lease.journal()
        wait = seconds_of(duration, "ctx.sleep")
        journal.sleep_until(journal.now() + wait, name)

    def sleep_until(self, when: datetime, *, name: str = "sleep") -> None:
        """``ctx.sleep`` until an aware datetime."""
        self._lease.journal().sleep_until(wake_time(when), name)

    def wait_for(self, name: str, *, timeout: float | timedelta | None = None) -> Any:
        """The payload of the next signal ``name`` sent to this job (``q.signal``): the k-th
        ``wait_for(name)`` takes the k-th. With none there yet, the job parks ``waiting``
        (holding no worker) until it comes; past ``timeout`` (from the first park) this
        raises ``errands.SignalTimeout`` — recorded, so every later run does the same."""
        limit = None if timeout is None else seconds_of(timeout, "ctx.wait_for timeout")
        return self._lease.journal().wait_for(name, limit)
