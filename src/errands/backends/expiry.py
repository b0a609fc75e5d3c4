"""The expiry noun: queued jobs that were not started within their ``expires_in`` of being
due are cancelled with ``EXPIRED:QUEUE`` (docs/flow-control.md "Time rules").

Queries: ``expiry.sql``, and the operator cancel's fenced ``cancel_queued_job``. The claim
already never starts such a job (one predicate in each claim query); this write makes them
final so counts, waiting dependents and ``wait`` see the outcome.
"""

from __future__ import annotations

from ..core.timerules import EXPIRED_QUEUE
from . import figures
from .host import DONE, F_CANCEL, SQLHost, detail, event_row

EXPIRED_CODE = EXPIRED_QUEUE
SYSTEM = "system"


class SQLExpiry(SQLHost):
    """Cancel the queued jobs past their start-by time."""

    def expire(self, now: float, limit: int) -> list[int]:
        """Cancel up to ``limit`` queued jobs whose ``expires_at`` is past at ``now`` and that
        never started, each with its ``CANCELLED`` event (detail: the error code), its
        figures and its dependents released, in one transaction; their ids."""
        q = self.q
        done: list[int] = []
        event = F_CANCEL.event
        with self._write("expire") as conn:
            ids = [r[0] for r in conn.execute(q["expired_jobs"], {"now": now, "limit": limit})]
            for job_id in ids:
                params = {
                    **F_CANCEL.params,
                    "job_id": job_id,
                    "now": now,
                    "error_code": EXPIRED_CODE,
                    "error_detail": "not started within its expires_in of being due",
                }
                if conn.execute(q["cancel_queued_job"], params).fetchone() is not None:
                    done.append(job_id)
                    if event in self._audit:
                        info = detail(error_code=EXPIRED_CODE)
                        conn.execute(q["insert_event"], event_row(job_id, now, event, SYSTEM, info))
            if done:
                self._woke(conn, DONE, done)
                figures.count(conn, q, done, done, with_runs=False)
                self._release(conn, done, now, SYSTEM)  # their dependents go on (or cancel)
        return done
