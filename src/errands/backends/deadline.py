"""The deadline time rule at the end of an attempt (docs/flow-control.md "Time rules"): a
retry whose run_at, or a sleep whose wake, falls at or after the job's deadline could never
start, so the job fails at once with ``DEADLINE:EXCEEDED`` instead of waiting for the expiry
service. Query: ``past_deadline`` (expiry.sql), compared in the database so the stored
precision decides (PostgreSQL keeps microseconds, a float does not)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..core.timerules import DEADLINE_EXCEEDED
from .base import Failed, Outcome, Retried, Suspended

MAX_DETAIL = 500  # error_detail's bound (docs/states.md)


def past_deadline(conn: Any, q: dict[str, str], outcomes: Sequence[Outcome]) -> list[Outcome]:
    """``outcomes``, with each retry or sleep that would start past its job's deadline turned
    into the job's failure (a retry's detail names the handler's error). One read per retry
    or sleep; successes and other outcomes cost nothing."""
    out = list(outcomes)
    for i, o in enumerate(out):
        if isinstance(o, Retried):
            when, why = o.retry_at, f"its retry would start after its deadline ({o.error_code}: "
            why += f"{o.error_detail})"
        elif isinstance(o, Suspended) and not o.waiting and o.run_at is not None:
            when, why = o.run_at, "its sleep would wake after its deadline"
        else:
            continue
        if conn.execute(q["past_deadline"], {"job_id": o.job_id, "at": when}).fetchone():
            tb = o.traceback if isinstance(o, Retried) else None
            exc = o.exception if isinstance(o, Retried) else None
            out[i] = Failed(
                o.job_id, o.attempt, o.started_at, DEADLINE_EXCEEDED, why[:MAX_DETAIL], tb, exc
            )
    return out
