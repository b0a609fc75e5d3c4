"""What a handler sees of its own job when it takes a ``ctx`` parameter."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from .core import validate

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
