"""The jobs noun, operator side: retry, cancel and bulk selection, and the reads of whole
jobs, attempts, events and blobs (for people: the CLI, the dashboard, ``Queue.get``).

Queries: ``jobs.sql`` and ``ops.sql`` (``ids_matching_*``). Rows are read by column name.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..core.records import Attempt, EventRecord, Job
from ..core.states import TERMINAL, Event, State
from . import figures
from .activity import write_audit
from .base import Audit, CancelReport, JobFilter
from .host import (
    DONE,
    F_CANCEL,
    F_CANCEL_WAITING,
    T_RETRY,
    WORK,
    SQLHost,
    event_of,
    event_row,
    from_json,
)

RETRIED = event_of("retry")


def ids_matching(status: str) -> str:
    """The ``ids_matching_*`` query for jobs in ``status``: one per index that holds a state's
    jobs (``jobs_queued_run_at``, ``jobs_running``, and ``jobs_finished`` for every final
    state), because a partial index serves only a query whose WHERE states its predicate as
    written — never a state bound as a parameter (SQLite; PostgreSQL's generic plans)."""
    if State(status) in TERMINAL:
        return "ids_matching_finished"
    return f"ids_matching_{State(status).value}"


class SQLJobOperator(SQLHost):
    """What an operator does to jobs, and what they read of them."""

    # -- operator actions ------------------------------------------------------------------

    def retry(
        self, job_ids: Sequence[int], actor: str, now: float, *, audit: Audit | None = None
    ) -> list[int]:
        done: list[int] = []
        params = {
            "to_state": T_RETRY.target.value,
            "from_states": self._list(sorted(s.value for s in T_RETRY.source)),
            "now": now,
        }
        left: list[dict[str, Any]] = []
        q = self.q
        with self._write("retry") as conn:
            # First the jobs that can be retried (locked on PostgreSQL), and their outcomes
            # taken off the figures while their rows still say final (figures.py).
            retryable: list[int] = []
            for job_id in dict.fromkeys(job_ids):  # a job named twice is retried once
                ident = {"job_id": job_id, "from_states": params["from_states"]}
                before = self._dicts(conn.execute(q["retry_outcome"], ident))
                if before:
                    retryable.append(job_id)
                    left.append(before[0])
            figures.uncount(conn, q, retryable)
            for job_id in retryable:
                if conn.execute(q["retry_job"], {**params, "job_id": job_id}).fetchone() is None:
                    raise AssertionError(f"job {job_id} changed inside the retry's transaction")
                done.append(job_id)
                if RETRIED in self._audit:
                    conn.execute(q["insert_event"], event_row(job_id, now, RETRIED, actor, None))
            # The outcome the job leaves is history: kept in the hourly rollup, as pruning
            # does, so "jobs finished" counters (metrics) never go down when a job is retried.
            if left:
                self._roll_up(conn, left)
            if done:  # the dependents their outcome cancelled wait for them again
                self._revive(conn, done, now, actor)
                self._woke(conn, WORK)
            write_audit(conn, q, audit, done)
        return done

    def cancel(
        self, job_ids: Sequence[int], actor: str, now: float, *, audit: Audit | None = None
    ) -> CancelReport:
        report = CancelReport()
        q = self.q
        event = F_CANCEL.event
        with self._write("cancel") as conn:
            for job_id in job_ids:
                params = {
                    **F_CANCEL.params,
                    "job_id": job_id,
                    "now": now,
                    "error_code": "CANCELLED:BY_USER",
                    "error_detail": f"cancelled by {actor} before it started",
                }
                waiting = {**params, **F_CANCEL_WAITING.params}  # enqueued after=[…]
                if (
                    conn.execute(q["cancel_queued_job"], params).fetchone() is not None
                    or conn.execute(q["cancel_queued_job"], waiting).fetchone() is not None
                ):
                    report.cancelled.append(job_id)
                    if event in self._audit:
                        conn.execute(q["insert_event"], event_row(job_id, now, event, actor, None))
                elif conn.execute(q["request_cancel"], {"job_id": job_id}).fetchone() is not None:
                    report.requested.append(job_id)
                    # Every request is recorded, a repeated one too: who asked, and when.
                    if Event.CANCEL_REQUESTED in self._audit:
                        row = event_row(job_id, now, Event.CANCEL_REQUESTED, actor, None)
                        conn.execute(q["insert_event"], row)
            if report.cancelled:
                self._woke(conn, DONE, report.cancelled)
                # Queued → cancelled; no attempt closed here (figures.py).
                cancelled = report.cancelled
                figures.count(conn, q, cancelled, cancelled, with_runs=False)
                self._release(conn, cancelled, now, actor)  # cancels their dependents
            write_audit(conn, q, audit, report)
        return report

    def match_ids(
        self, status: str, *, type: str | None, queue: str | None, error_code: str | None
    ) -> list[int]:
        params = {"status": status, "type": type, "queue": queue, "error_code": error_code}
        return [int(r["id"]) for r in self._fetch(ids_matching(status), params)]

    # -- reads -----------------------------------------------------------------------------

    def get_job(self, job_id: int) -> Job | None:
        with self._read_rows() as conn:
            rows = self._dicts(conn.execute(self.q["get_job"], {"id": job_id}))
        return self._job(rows[0]) if rows else None

    def list_jobs(self, flt: JobFilter) -> list[Job]:
        params = {
            "status": flt.status,
            "type": flt.type,
            "queue": flt.queue,
            "error_code": flt.error_code,
            "before_id": flt.before_id,
            "limit": flt.limit,
        }
        with self._read_rows() as conn:
            return [self._job(r) for r in self._dicts(conn.execute(self.q["list_jobs"], params))]

    def newest_job_id(self) -> int | None:
        rows = self._fetch("newest_job_id")
        return None if not rows or rows[0]["id"] is None else int(rows[0]["id"])

    def search_jobs(self, flt: JobFilter, text: str, floor_id: int) -> list[Job]:
        """Jobs with ``floor_id <= id < flt.before_id`` matching the exact filters and ``text``
        (a prefix of type, queue or error code; or inside the error message or payload),
        newest first, at most ``flt.limit``. The caller bounds the window."""
        needle = text.lower()
        escaped = needle.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        params = {
            "status": flt.status,
            "type": flt.type,
            "queue": flt.queue,
            "error_code": flt.error_code,
            "before_id": flt.before_id,
            "floor_id": floor_id,
            "prefix": escaped + "%",
            "needle": needle,
            "limit": flt.limit,
        }
        with self._read_rows() as conn:
            rows = self._dicts(conn.execute(self.q["search_jobs"], params))
        return [self._job(r) for r in rows]

    def snoozed_jobs(
        self, flt: JobFilter, scan: int, floor_id: int = 0
    ) -> tuple[list[Job], int, int | None]:
        """Queued jobs whose latest attempt ended snoozed, newest first, at most ``flt.limit``,
        among the newest ``scan`` snoozed attempts of jobs with ``floor_id <= id <
        flt.before_id`` (the partial index job_attempts_snoozed); with how many attempts that
        window held and the lowest job id in it (None: it was empty)."""
        params = {
            "type": flt.type,
            "queue": flt.queue,
            "error_code": flt.error_code,
            "before_id": flt.before_id if flt.before_id is not None else 2**62,
            "floor_id": floor_id,
            "scan": scan,
            "limit": flt.limit,
        }
        with self._read_rows() as conn:
            rows = self._dicts(conn.execute(self.q["snoozed_jobs"], params))
            window = self._dicts(conn.execute(self.q["snoozed_window"], params))[0]
        floor = None if window["floor"] is None else int(window["floor"])
        return [self._job(r) for r in rows], int(window["n"]), floor

    def attempts(self, job_id: int) -> list[Attempt]:
        with self._read_rows() as conn:
            rows = self._dicts(conn.execute(self.q["job_attempts"], {"job_id": job_id}))
        dt = self._dt
        return [
            Attempt(
                id=r["id"],
                job_id=r["job_id"],
                attempt=r["attempt"],
                worker_id=r["worker_id"],
                started_at=dt(r["started_at"]),
                finished_at=dt(r["finished_at"]),
                status=r["status"],
                error_code=r["error_code"],
                error_detail=r["error_detail"],
                traceback_ref=r["traceback_ref"],
            )
            for r in rows
        ]

    def events(self, job_id: int) -> list[EventRecord]:
        with self._read_rows() as conn:
            rows = self._dicts(conn.execute(self.q["job_events"], {"job_id": job_id}))
        return [
            EventRecord(
                id=r["id"],
                job_id=r["job_id"],
                ts=self._dt(r["ts"]),
                event=r["event"],
                actor=r["actor"],
                detail=from_json(r["detail"]),
            )
            for r in rows
        ]

    def blob(self, ref: str) -> str | None:
        if not ref.startswith("blob:") or not ref[5:].isdigit():
            return None
        with self._read_rows() as conn:
            rows = self._dicts(conn.execute(self.q["get_blob"], {"id": int(ref[5:])}))
        return None if not rows else str(rows[0]["body"])

    def _job(self, r: dict[str, Any]) -> Job:
        dt = self._dt
        return Job(
            id=r["id"],
            queue=r["queue"],
            type=r["type"],
            payload=from_json(r["payload"]),
            status=r["status"],
            priority=r["priority"],
            attempts=r["attempts"],
            max_attempts=r["max_attempts"],
            run_at=dt(r["run_at"]),
            created_at=dt(r["created_at"]),
            started_at=dt(r["started_at"]),
            finished_at=dt(r["finished_at"]),
            worker_id=r["worker_id"],
            heartbeat_at=dt(r["heartbeat_at"]),
            lease_expires_at=dt(r["lease_expires_at"]),
            unique_key=r["unique_key"],
            error_code=r["error_code"],
            error_detail=r["error_detail"],
            result=from_json(r["result"]),
            payload_ref=r["payload_ref"],
            result_ref=r["result_ref"],
            cancel_requested=bool(r["cancel_requested"]),
            headers=from_json(r.get("headers")),
            limit_key=r.get("limit_key"),
            limit_group=r.get("limit_group"),
            progress=r.get("progress"),
            progress_message=r.get("progress_message"),
            progress_at=dt(r.get("progress_at")),
            unique_for=r.get("unique_for"),
            debounce_key=r.get("debounce_key"),
            expires_in=r.get("expires_in"),
            expires_at=dt(r.get("expires_at")),
            deadline_at=dt(r.get("deadline_at")),
        )
