"""What a worker tells its log, through the standard ``logging`` module.

Loggers live under ``errands`` (``errands.worker`` for job outcomes, ``errands.maintenance``
for rescues), so an application routes them like any other. Levels:

- WARNING: a failed attempt (with the retry it scheduled, or "failed for good"), an outcome
  refused by the fence, a job rescued after its lease expired;
- INFO: a job cancelled while running;
- DEBUG (``errands worker --verbose``): every job started, and every success with its duration.

Each record carries its fields in ``record.errands`` (a dict), which ``JsonFormatter`` writes
as one JSON object per line (``--log-format json``) for log shippers.

The worker calls ``outcomes()`` once per recorded batch and ``started()`` per job only when
the logger is enabled for the level, so a quiet worker pays nothing per job.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from ..backends.base import Cancelled, ClaimedJob, Failed, Outcome, Retried, Succeeded

log = logging.getLogger("errands.worker")


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="milliseconds")


def started(job: ClaimedJob, worker_id: str) -> None:
    """DEBUG: one job's handler starts (callers check ``log.isEnabledFor(DEBUG)`` first)."""
    fields = {
        "event": "started",
        "job_id": job.id,
        "type": job.type,
        "queue": job.queue,
        "attempt": job.attempt,
        "max_attempts": job.max_attempts,
        "worker_id": worker_id,
    }
    log.debug(
        "job %d %s attempt %d/%d started",
        job.id,
        job.type,
        job.attempt,
        job.max_attempts,
        extra={"errands": fields},
    )


def outcomes(
    batch: Sequence[tuple[Any, Outcome | None, float]],
    written: Sequence[Outcome],
    applied: Sequence[bool],
    worker_id: str,
    now: float,
) -> None:
    """Log one recorded batch. ``batch`` is the worker's (slot, outcome or None, seconds the
    handler ran); ``written`` the outcomes recorded for its non-None entries, in order (one
    the database refused is replaced by the failure recorded instead), and ``applied`` whether
    the fence applied each. Called only when the logger is enabled for WARNING; a batch of
    plain successes costs one pass."""
    debug = log.isEnabledFor(logging.DEBUG)
    ran = [(slot.job, seconds) for slot, o, seconds in batch if o is not None]
    if not debug and all(applied):
        # The common case: only failures and cancels have something to say.
        for (job, seconds), outcome in zip(ran, written, strict=True):
            if type(outcome) is not Succeeded:
                _one(job, outcome, True, seconds, False, worker_id, now)
        return
    for (job, seconds), outcome, ok in zip(ran, written, applied, strict=True):
        _one(job, outcome, ok, seconds, debug, worker_id, now)


def _one(
    job: ClaimedJob,
    outcome: Outcome,
    applied: bool,
    ran: float,
    debug: bool,
    worker_id: str,
    now: float,
) -> None:
    if isinstance(outcome, Succeeded) and not debug and applied:
        return  # the common case, and nothing to say at the default level
    fields: dict[str, Any] = {
        "job_id": job.id,
        "type": job.type,
        "queue": job.queue,
        "attempt": outcome.attempt,
        "max_attempts": job.max_attempts,
        "duration": round(ran, 6),
        "worker_id": worker_id,
    }
    head = f"job {job.id} {job.type} attempt {outcome.attempt}/{job.max_attempts}"
    if not applied:
        fields["event"] = "refused"
        log.warning(
            "%s: outcome refused by the fence — the attempt no longer holds the job (its "
            "lease was recovered and another attempt may run it)",
            head,
            extra={"errands": fields},
        )
    elif isinstance(outcome, Failed | Retried):
        fields.update(error_code=outcome.error_code, error=outcome.error_detail)
        if isinstance(outcome, Retried):
            fields.update(event="retry_scheduled", next_run_at=_iso(outcome.retry_at))
            log.warning(
                "%s failed after %.3fs: %s: %s; retry at %s (in %.1fs)",
                head,
                ran,
                outcome.error_code,
                outcome.error_detail,
                fields["next_run_at"],
                max(outcome.retry_at - now, 0.0),
                extra={"errands": fields},
            )
        else:
            fields["event"] = "failed"
            log.warning(
                "%s failed after %.3fs: %s: %s; no retry (failed for good)",
                head,
                ran,
                outcome.error_code,
                outcome.error_detail,
                extra={"errands": fields},
            )
    elif isinstance(outcome, Cancelled):
        fields.update(event="cancelled", error_code=outcome.error_code)
        log.info("%s cancelled while running, after %.3fs", head, ran, extra={"errands": fields})
    elif isinstance(outcome, Succeeded) and debug:
        fields["event"] = "succeeded"
        log.debug("%s succeeded in %.3fs", head, ran, extra={"errands": fields})


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, message, and the record's errands fields."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": _iso(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = getattr(record, "errands", None)
        if isinstance(fields, dict):
            out.update(fields)
        if record.exc_info:
            out["traceback"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure(*, quiet: bool, verbose: bool, fmt: str) -> None:
    """The CLI worker's logging: stderr, text or JSON lines; WARNING with --quiet, DEBUG for
    errands' loggers with --verbose, INFO otherwise."""
    import sys

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    logging.basicConfig(level=logging.WARNING if quiet else logging.INFO, handlers=[handler])
    if verbose:
        logging.getLogger("errands").setLevel(logging.DEBUG)
