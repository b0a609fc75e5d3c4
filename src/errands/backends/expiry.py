"""The expiry noun: queued jobs that were not started within their ``expires_in`` of being
due are cancelled with ``EXPIRED:QUEUE``, and queued jobs past their deadline fail with
``DEADLINE:EXCEEDED`` (docs/flow-control.md "Time rules").

Queries: ``expiry.sql``, and the operator cancel's fenced ``cancel_queued_job`` (it sets the
state its fence binds, so the deadline's failure uses it too). The claim already never starts
such a job (one predicate in each claim query); this write makes them final so counts,
waiting dependents and ``wait`` see the outcome.
"""

from __future__ import annotations

from typing import Any

from ..core.timerules import DEADLINE_EXCEEDED, EXPIRED_QUEUE
from . import figures
from .host import DONE, F_CANCEL, F_MISS_DEADLINE, Fence, SQLHost, detail, event_row

EXPIRED_CODE = EXPIRED_QUEUE
SYSTEM = "system"


class SQLExpiry(SQLHost):
    """Cancel the queued jobs past their start-by time; fail those past their deadline."""

    def expire(self, now: float, limit: int) -> list[int]:
        """Cancel up to ``limit`` queued jobs whose ``expires_at`` is past at ``now`` and that
        never started, each with its ``CANCELLED`` event (detail: the error code), its
        figures and its dependents released, in one transaction; their ids."""
        why = "not started within its expires_in of being due"
        return self._end_queued("expire", "expired_jobs", F_CANCEL, EXPIRED_CODE, why, now, limit)

    def fail_past_deadline(self, now: float, limit: int) -> list[int]:
        """Fail up to ``limit`` queued jobs whose ``deadline_at`` is past at ``now`` (no
        attempt may start any more), each with its ``FAILED`` event, figures and dependents
        released, in one transaction; their ids."""
        why = "no attempt started before its deadline"
        return self._end_queued(
            "fail_past_deadline",
            "deadline_jobs",
            F_MISS_DEADLINE,
            DEADLINE_EXCEEDED,
            why,
            now,
            limit,
        )

    def _end_queued(
        self, name: str, query: str, fence: Fence, code: str, why: str, now: float, limit: int
    ) -> list[int]:
        q = self.q
        done: list[int] = []
        event = fence.event
        with self._write(name) as conn:
            ids = [r[0] for r in conn.execute(q[query], {"now": now, "limit": limit})]
            for job_id in ids:
                params: dict[str, Any] = {
                    **fence.params,
                    "job_id": job_id,
                    "now": now,
                    "error_code": code,
                    "error_detail": why,
                }
                if conn.execute(q["cancel_queued_job"], params).fetchone() is not None:
                    done.append(job_id)
                    if event in self._audit:
                        info = detail(error_code=code)
                        conn.execute(q["insert_event"], event_row(job_id, now, event, SYSTEM, info))
            if done:
                self._woke(conn, DONE, done)
                figures.count(conn, q, done, done, with_runs=False)
                self._release(conn, done, now, SYSTEM)  # their dependents go on (or cancel)
        return done
