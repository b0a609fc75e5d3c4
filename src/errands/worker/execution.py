"""Running one claimed job's handler and turning what happened into an Outcome.

Shared by the thread runners (sync handlers) and the event loop (async handlers), so both
classify errors, retries and results the same way.
"""

from __future__ import annotations

import json
import traceback
from typing import Any

from ..backends.base import Cancelled, ClaimedJob, Failed, Outcome, Retried, Snoozed, Succeeded
from ..context import JobContext
from ..core import payload as payload_json
from ..core.backoff import delay_for
from ..errors import JobError, PayloadError, Snooze, StaleAttempt, StepMismatch, Suspended
from ..tasks import CTX_PARAM, Task

DETAIL_LIMIT = 500  # docs/states.md: error_detail is a summary of at most 500 characters
# A traceback is kept outside the row, but still has to be storable: a runaway one (a huge
# message, a deep recursion) keeps its head and its tail — where the raise happened.
TRACEBACK_LIMIT = 64 * 1024
BASE_EXCEPTION_CODE = "HANDLER:BASE_EXCEPTION"
SNOOZE_LIMIT = "SNOOZE:LIMIT"  # a Snooze past the task's max_snoozes (docs/flow-control.md)


def summary(exc: BaseException) -> str:
    """``Class: message``, storable on every backend (no NUL, no lone surrogate) and at most
    DETAIL_LIMIT characters — also when the exception's own ``__str__`` raises."""
    name = type(exc).__name__
    try:
        message = str(exc)
    except BaseException as broken:  # a lying __str__ must not take the runner down with it
        message = f"<str() of the exception failed: {type(broken).__name__}>"
    text = f"{name}: {message}" if message else name
    return payload_json.storable_text(text, DETAIL_LIMIT)


def format_traceback(exc: BaseException) -> str:
    try:
        text = "".join(traceback.format_exception(exc))
    except BaseException as broken:
        text = f"{summary(exc)}\n(the traceback could not be formatted: {type(broken).__name__})"
    text = payload_json.storable_text(text)
    if len(text) > TRACEBACK_LIMIT:
        half = TRACEBACK_LIMIT // 2
        text = f"{text[:half]}\n… ({len(text) - 2 * half} characters cut) …\n{text[-half:]}"
    return text


def prepare(task: Task[Any, Any], job: ClaimedJob, ctx: JobContext | None) -> dict[str, Any]:
    """The handler's keyword arguments. Whether they fit its signature is checked only when
    the call raises TypeError (see ``explain``): binding every call would cost more than a
    no-op handler."""
    try:
        kwargs = json.loads(job.payload)
    except ValueError as exc:
        raise PayloadError(f"stored payload is not JSON: {exc}") from None
    if type(kwargs) is not dict:
        task.check_payload(kwargs)  # raises PayloadError naming the type
    if ctx is not None:
        if CTX_PARAM in kwargs:  # enqueued by name: the rule check_payload applies at enqueue
            raise task.ctx_clash()
        kwargs[CTX_PARAM] = ctx
    return kwargs  # type: ignore[no-any-return]


def explain(task: Task[Any, Any], kwargs: dict[str, Any], exc: Exception) -> Exception:
    """A TypeError from calling the handler is a payload that does not fit its signature
    (INVALID_INPUT:PAYLOAD, not retried) unless the payload binds — then the handler itself
    raised it."""
    if isinstance(exc, TypeError) and not isinstance(exc, PayloadError):
        payload = {k: v for k, v in kwargs.items() if k != CTX_PARAM}
        try:
            task.check_payload(payload)
        except PayloadError as mismatch:
            return mismatch
    return exc


def succeeded(
    job: ClaimedJob, started: float, result: Any, max_bytes: int | None = None
) -> Outcome:
    """A success with its result encoded by the payload rule; a result that is not plain
    JSON, cannot be stored on every backend or exceeds ``max_result_bytes`` fails this job
    alone with INVALID_OUTPUT:RESULT (not retried: running it again returns the same)."""
    try:
        text = (
            None
            if result is None
            else payload_json.encode(
                result, what="result", max_bytes=max_bytes, setting="max_result_bytes"
            )
        )
    except PayloadError as exc:
        return Failed(job.id, job.attempt, started, "INVALID_OUTPUT:RESULT", summary(exc), None)
    return Succeeded(job.id, job.attempt, started, text)


def failed(
    task: Task[Any, Any],
    job: ClaimedJob,
    started: float,
    now: float,
    exc: BaseException,
) -> Outcome:
    """Classify an exception into a retry (``Retried``) or a final failure (``Failed``), per
    the task's rules. Every text it produces is storable (see ``payload.storable_text``)
    before it reaches a batch."""
    if isinstance(exc, Snooze):  # not a failure: the job comes back later (docs/flow-control.md)
        if job.attempt > task.options.max_snoozes:  # a snooze loop (docs/flow-control.md)
            detail = (
                f"snoozed again at attempt {job.attempt}, past max_snoozes="
                f"{task.options.max_snoozes}; raise @q.task(max_snoozes=…) if it must wait longer"
            )
            return Failed(job.id, job.attempt, started, SNOOZE_LIMIT, detail, None, exc)
        return Snoozed(job.id, job.attempt, started, now + exc.seconds, exc.seconds)
    if isinstance(exc, Suspended):  # ctx.sleep / ctx.wait_for (docs/durable-steps.md)
        return exc.outcome  # type: ignore[no-any-return]
    tb = format_traceback(exc)
    if isinstance(exc, StepMismatch | StaleAttempt):
        # A mismatch is final (running it again meets the same journal); a stale attempt's
        # outcome is refused by the fence whatever it is.
        code = "STEP:MISMATCH" if isinstance(exc, StepMismatch) else "LOST:STALE_ATTEMPT"
        return Failed(job.id, job.attempt, started, code, summary(exc), tb, exc)
    opts = task.options
    if isinstance(exc, JobError):
        code, retry = exc.code, exc.retry
        detail = payload_json.storable_text(str(exc.detail or exc.code), DETAIL_LIMIT)
    elif isinstance(exc, PayloadError):
        code, detail, retry = "INVALID_INPUT:PAYLOAD", summary(exc), False
    else:
        # SystemExit, KeyboardInterrupt, GeneratorExit or a custom BaseException: the
        # attempt fails like any other, under a code of its own (docs/runtime.md).
        base = not isinstance(exc, Exception)
        code = BASE_EXCEPTION_CODE if base else f"INTERNAL:{type(exc).__name__}"
        detail = summary(exc)
        if opts.discard_on and isinstance(exc, opts.discard_on):
            retry = False
        elif opts.retry_on:
            retry = isinstance(exc, opts.retry_on)
        else:
            retry = True
    code = payload_json.storable_text(str(code), DETAIL_LIMIT)
    if retry and job.attempt < job.max_attempts:
        delay = delay_for(opts.backoff, job.attempt)
        return Retried(job.id, job.attempt, started, code, detail, tb, now + delay, delay, exc)
    return Failed(job.id, job.attempt, started, code, detail, tb, exc)


def unstorable(outcome: Outcome, reason: str) -> Outcome:
    """What to record instead of an outcome the database refused: a final failure whose
    every field is storable (no traceback, no result), so it cannot be refused in turn.
    Released and cancelled outcomes hold no text of the handler's: they are kept."""
    if isinstance(outcome, Succeeded):
        code = "INVALID_OUTPUT:RESULT"
    elif isinstance(outcome, Failed | Retried):
        code = "INVALID_OUTPUT:ERROR"
    else:
        return outcome
    detail = payload_json.storable_text(f"the outcome could not be stored: {reason}", DETAIL_LIMIT)
    return Failed(outcome.job_id, outcome.attempt, outcome.started_at, code, detail, None)


def cancelled(job: ClaimedJob, started: float) -> Outcome:
    return Cancelled(job.id, job.attempt, started)
