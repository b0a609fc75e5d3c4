"""The leader / maintenance noun: leader leases, rescue of expired leases, startup cleanup.

Queries: ``maintenance.sql`` and ``jobs.sql`` (``expired_leases``, ``recover_job``,
``lose_attempt``). A recovered job goes back to queued, or to failed on its last attempt,
fenced and audited by the ``recover`` / ``recover_exhausted`` transitions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..core.states import AttemptStatus
from . import figures
from .base import RescueReport
from .host import (
    DONE,
    F_RECOVER,
    F_RECOVER_EXHAUSTED,
    LOST_CODE,
    WORK,
    Conn,
    SQLHost,
    detail,
    event_row,
)
from .lease_sweep import FROM_THE_FRONT, LeaseSweep


class SQLLeader(SQLHost):
    """Maintenance roles held by one worker at a time, and the recovery of lost attempts."""

    # The rescuer's sweep starts past the leases it already saw expire (lease_sweep.py):
    # PostgreSQL, whose index of running jobs keeps finished jobs' entries until VACUUM.
    # SQLite removes an entry with its row's change, so its sweep starts at the front.
    sweep_resumes = False

    @property
    def lease_sweep(self) -> LeaseSweep:
        """Where this process's next sweep for expired leases starts (made on first use)."""
        sweep: LeaseSweep = self.__dict__.setdefault("_lease_sweep", LeaseSweep())
        return sweep

    def try_lead(self, name: str, holder: str, ttl: float, now: float) -> bool:
        """Take or renew the lease on a maintenance role; True while we hold it."""
        params = {"name": name, "holder": holder, "ttl": ttl, "now": now}
        with self._write("try_lead") as conn:
            return conn.execute(self.q["try_lead"], params).fetchone() is not None

    def resign(self, name: str, holder: str) -> None:
        with self._write("resign") as conn:
            conn.execute(self.q["resign"], {"name": name, "holder": holder})

    def host_workers(self, hostname: str) -> list[tuple[str, int]]:
        rows = self._fetch("host_workers", {"hostname": hostname})
        return [(r["id"], int(r["pid"])) for r in rows]

    def rescue(self, now: float, *, limit: int = 1000) -> RescueReport:
        """Recover running jobs whose lease expired: attempt → lost, job → queued (attempts
        left) or failed (that was the last one)."""
        after = FROM_THE_FRONT
        if self.sweep_resumes:
            after = self.lease_sweep.start(now)
            if after != FROM_THE_FRONT:
                self.lease_sweep.probe(now, lambda at: self.expired_lease_behind(at, now))
        with self._write("rescue") as conn:
            params = {"now": now, "limit": limit, "after": after}
            rows = self._dicts(conn.execute(self.q["expired_leases"], params))
            # Seen before recovering: a row skipped as locked is still running in the range.
            seen = len(rows)
            if self.sweep_resumes and len(rows) < limit:
                seen = int(conn.execute(self.q["expired_leases_seen"], params).fetchone()[0])
            report = self._recover(conn, rows, "lease_expired", now)
            if report.recovered:
                self._woke(conn, WORK)  # queued again: an idle worker runs them now
            if report.exhausted:
                self._woke(conn, DONE, report.exhausted)
                self._count_exhausted(conn, report.exhausted)
                self._release(conn, report.exhausted, now, "system")
        if self.sweep_resumes:
            self.lease_sweep.swept(now, max(seen, len(rows)), limit, skipped=seen > len(rows))
        return report

    def expired_lease_behind(self, after: float, now: float) -> float | None:
        """The first lease expired before ``after`` (epoch seconds), where the sweep does not
        look, or None (jobs.sql ``expired_lease_behind``, lease_sweep.py's probe)."""
        rows = self._fetch("expired_lease_behind", {"after": after, "now": now})
        return None if not rows else self._epoch(rows[0]["lease_expires_at"])

    def recover_workers(self, worker_ids: Sequence[str], now: float) -> RescueReport:
        """Startup cleanup: recover at once the running jobs of workers known to be dead
        (same host, process gone), without waiting for their leases, and close their rows."""
        if not worker_ids:
            return RescueReport()
        with self._write("recover_workers") as conn:
            ids = self._list(list(worker_ids))
            rows = self._dicts(conn.execute(self.q["running_of_workers"], {"worker_ids": ids}))
            report = self._recover(conn, rows, "startup_cleanup", now)
            if report.recovered:
                self._woke(conn, WORK)  # queued again: an idle worker runs them now
            if report.exhausted:
                self._woke(conn, DONE, report.exhausted)
                self._count_exhausted(conn, report.exhausted)
                self._release(conn, report.exhausted, now, "system")
            for wid in worker_ids:
                conn.execute(self.q["mark_worker_dead"], {"id": wid, "now": now})
                # A dead leader's roles go at once, not when its leases lapse.
                conn.execute(self.q["release_leases_of"], {"holder": wid})
        return report

    def _count_exhausted(self, conn: Conn, job_ids: list[int]) -> None:
        """Jobs failed because their last attempt was lost: counted as failed (figures.py);
        a lost attempt has no run time (its end is when it was noticed, not when the handler
        stopped)."""
        figures.count(conn, self.q, job_ids, job_ids, with_runs=False)

    def _recover(
        self, conn: Conn, rows: list[dict[str, Any]], reason: str, now: float
    ) -> RescueReport:
        report = RescueReport()
        q = self.q
        lost = AttemptStatus.LOST.value
        why = "lease expired" if reason == "lease_expired" else "its worker process died"
        for r in rows:
            job_id, attempt, worker = r["id"], r["attempts"], r["worker_id"]
            exhausted = attempt >= r["max_attempts"]
            fence = F_RECOVER_EXHAUSTED if exhausted else F_RECOVER
            key = {"job_id": job_id, "attempt": attempt}
            errs = {"error_code": LOST_CODE, "error_detail": f"{why} (worker {worker})"}
            params = {**key, **fence.params, **errs, "now": now}
            if conn.execute(q["recover_job"], params).rowcount != 1:
                continue
            conn.execute(q["lose_attempt"], {**key, **errs, "now": now, "status": lost})
            if fence.event in self._audit:
                info = detail(
                    reason=reason,
                    attempt=attempt,
                    worker=worker,
                    outcome=fence.params["to_state"],
                )
                conn.execute(q["insert_event"], event_row(job_id, now, fence.event, "system", info))
            (report.exhausted if exhausted else report.recovered).append(job_id)
        return report
