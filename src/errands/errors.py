"""Exceptions errands raises, and the one a handler raises to choose its own error code.

Every message names what is wrong and what to do about it, on one line.
"""

from __future__ import annotations

import re
from typing import Any

_CODE = re.compile(r"^[A-Z][A-Z0-9_]*:[A-Za-z0-9_.\-]+$")


class ErrandsError(Exception):
    """Base class for every error errands raises itself."""


class PayloadError(ErrandsError, TypeError):
    """A payload or result is not plain JSON; nothing was written."""


class PayloadTooLargeError(PayloadError, ValueError):
    """A payload is larger than ``max_payload_bytes``; nothing was written."""


class UnknownTaskError(ErrandsError, LookupError):
    """A job type that no task on this Queue is registered for."""


class ConfigurationError(ErrandsError, ValueError):
    """A setting or argument that errands cannot work with."""


class SchemaVersionError(ErrandsError):
    """The database was written by a newer errands (or is not an errands database)."""


class SchemaConflictError(SchemaVersionError):
    """The database already holds an object (table, view, index…) under a name errands needs;
    refused before anything was changed."""


class DatabaseError(ErrandsError):
    """The database cannot be used: read-only, corrupt, full disk, unsupported version."""


class DatabaseBusyError(DatabaseError):
    """The write lock could not be taken within the busy timeout."""


class DatabaseReplacedError(DatabaseError):
    """The SQLite file was deleted or replaced (renamed over) while errands had it open; a
    worker stops rather than keep writing to a file nobody else can see."""


class QueueClosedError(DatabaseError):
    """The Queue's connections were closed (``q.close()``) while something still used them;
    a worker stops rather than retry writes that can never succeed."""


class GraduatedError(ErrandsError):
    """This SQLite file's queue was moved to PostgreSQL by ``errands graduate``: it takes no
    new work (no worker, no enqueue) until reopened deliberately."""

    @classmethod
    def of(cls, where: str, target: str, when: str) -> GraduatedError:
        """The error for ``where``, graduated to ``target`` at ``when``: what to do next."""
        return cls(
            f"{where} was graduated to {target} on {when}: its queue lives there now, so this "
            f"file takes no new jobs and runs no worker; point ERRANDS_DB/--db at {target}, or "
            f"reopen this file deliberately with `errands reopen --db {where}` "
            "(or Queue(..., allow_graduated=True))"
        )


class JobNotFoundError(ErrandsError, LookupError):
    """No job with that id."""


class InvalidTransitionError(ErrandsError):
    """The job is not in a state that allows the requested change."""


class WaitTimeout(ErrandsError, TimeoutError):
    """``Queue.wait`` gave up: the job was not final within the timeout (it is left as it is)."""


# The longest delay, snooze, timeout or interval errands takes: now + this stays a time both
# backends store and read back for millennia (core/validate.py checks every one against it).
MAX_DURATION = 1000 * 365 * 86400.0


class SignalTimeout(ErrandsError, TimeoutError):
    """``ctx.wait_for(name, timeout=…)``: no signal of that name came within the timeout,
    measured from the first time the job parked there. Recorded: every later run of the job
    raises it again at the same call (docs/durable-steps.md)."""


class Suspended(BaseException):
    """Raised by ``ctx.sleep``/``ctx.wait_for`` to end the run until the job's wake time or
    signal. Not an ``Exception``, so a handler's ``except Exception`` cannot swallow it;
    ``finally`` blocks run. ``outcome`` is what the worker records."""

    def __init__(self, outcome: Any) -> None:
        super().__init__("the run is suspended (ctx.sleep or ctx.wait_for)")
        self.outcome = outcome


class StepMismatch(BaseException):
    """The k-th durable call of this run is not the k-th recorded one (the handler's code
    changed between runs): the job fails ``STEP:MISMATCH``, not retried."""


class StaleAttempt(BaseException):
    """This run's attempt no longer holds its job (the lease was recovered and the job moved
    on): it records nothing more, and its handler must stop."""


class Snooze(Exception):
    """Raise from a handler to come back later: the attempt ends ``snoozed``, the job is
    queued again ``seconds`` from now, and ``max_attempts`` grows by one so a snooze never
    uses up the job's attempts (a rate-limited API answering 429 with Retry-After). The
    delay gets ``delay=``'s rule (0 to 1000 years); a task's ``max_snoozes`` bounds how
    often (docs/flow-control.md)."""

    def __init__(self, seconds: float) -> None:
        if (
            isinstance(seconds, bool)
            or not isinstance(seconds, int | float)
            or not 0 <= seconds <= MAX_DURATION  # also refuses NaN
        ):
            raise ValueError(
                f"Snooze takes seconds >= 0 and at most {MAX_DURATION:.0f} (1000 years), "
                f"got {seconds!r:.40}"
            )
        super().__init__(f"snoozed for {seconds}s")
        self.seconds = float(seconds)


class JobError(Exception):
    """Raise from a handler to fail the attempt with your own aggregatable error code.

    ``code`` is ``CATEGORY:SUBCATEGORY`` (for example ``SMTP:REJECTED``); ``retry=False``
    makes the failure final whatever attempts are left.
    """

    def __init__(self, code: str, detail: str = "", *, retry: bool = True) -> None:
        if not _CODE.match(code):
            raise ValueError(
                f"error code {code!r} is not CATEGORY:SUBCATEGORY; use upper-case letters, "
                "digits and '_' before the colon, e.g. 'SMTP:REJECTED'"
            )
        super().__init__(f"{code}: {detail}" if detail else code)
        self.code = code
        self.detail = detail
        self.retry = retry


def at_item(n: int, exc: ErrandsError) -> ErrandsError:
    """The same error class, its message prefixed with the item's index (enqueue_many)."""
    try:
        return type(exc)(f"enqueue_many item {n}: {exc}")
    except TypeError:
        return exc
