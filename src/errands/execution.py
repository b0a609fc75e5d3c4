"""Running one claimed job's handler and turning what happened into an Outcome.

Shared by the thread runners (sync handlers) and the event loop (async handlers), so both
classify errors, retries and results the same way.
"""

from __future__ import annotations

import json
import traceback
from typing import Any

from . import payload as payload_json
from .backends.base import Cancelled, ClaimedJob, Failed, Outcome, Succeeded
from .backoff import delay_for
from .context import JobContext
from .errors import JobError, PayloadError
from .tasks import CTX_PARAM, Task

DETAIL_LIMIT = 500


def summary(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return text if len(text) <= DETAIL_LIMIT else text[: DETAIL_LIMIT - 1] + "…"


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


def succeeded(job: ClaimedJob, started: float, result: Any) -> Outcome:
    try:
        text = None if result is None else payload_json.encode(result, what="result")
    except PayloadError as exc:
        return Failed(
            job.id, job.attempt, started, "INVALID_OUTPUT:RESULT", summary(exc), None, None
        )
    return Succeeded(job.id, job.attempt, started, text)


def failed(
    task: Task[Any, Any],
    job: ClaimedJob,
    started: float,
    now: float,
    exc: BaseException,
    *,
    code: str | None = None,
) -> Outcome:
    """Classify an exception into a retry or a final failure, per the task's rules."""
    tb = "".join(traceback.format_exception(exc))
    opts = task.options
    if isinstance(exc, JobError):
        code, detail, retry = exc.code, (exc.detail or exc.code)[:DETAIL_LIMIT], exc.retry
    elif isinstance(exc, PayloadError):
        code, detail, retry = "INVALID_INPUT:PAYLOAD", summary(exc), False
    else:
        code = code or f"INTERNAL:{type(exc).__name__}"
        detail = summary(exc)
        if opts.discard_on and isinstance(exc, opts.discard_on):
            retry = False
        elif opts.retry_on:
            retry = isinstance(exc, opts.retry_on)
        else:
            retry = True
    if retry and job.attempt < job.max_attempts:
        delay = delay_for(opts.backoff, job.attempt)
        return Failed(job.id, job.attempt, started, code, detail, tb, now + delay, delay, exc)
    return Failed(job.id, job.attempt, started, code, detail, tb, None, exception=exc)


def cancelled(job: ClaimedJob, started: float) -> Outcome:
    return Cancelled(job.id, job.attempt, started)
