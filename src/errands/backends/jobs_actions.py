"""The jobs noun, the operator's edits that are not transitions: delete, run now, priority.

Queries: ``actions.sql``. Each verb takes the ids one at a time inside one write transaction:
it reads the job (locked on PostgreSQL, so a claim skips it until the edit commits), decides
from what it read why it would refuse, then applies the edit with a statement fenced on the
job's state (``core.states``: ``RUN_NOW_FROM``, ``REPRIORITIZE_FROM``, ``DELETE_FROM``). So a
worker's claim or outcome is never lost to an edit: whichever commits first, the other sees it
(SQLite: one writer at a time; PostgreSQL: the row lock and the fence).

- run now: a queued job with a ``run_at`` ahead of ``now`` gets ``run_at = now``
  (``RESCHEDULED``, detail: the old and new ``run_at``); idle workers are woken.
- priority: a queued or waiting job gets the new priority (``PRIORITY_CHANGED``, detail: old
  and new).
- delete: any job but a running one (cancel it first), and never one a waiting job depends on
  (its outcome decides the waiting job's: SPEC §4c, as prune). Its attempts, events and edges
  go with it (ON DELETE CASCADE), so it leaves no event; a final job's outcome is taken off the
  figures and kept in the hourly rollup first, as prune does, so finished-job counters never go
  down. The callers log each delete (who, which ids).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, cast

from ..core.states import DELETE_FROM, REPRIORITIZE_FROM, RUN_NOW_FROM, TERMINAL, Event, State
from . import figures
from .base import ActionReport
from .host import Conn, SQLHost, detail, event_row, iso

FINAL = frozenset(s.value for s in TERMINAL)
NO_SUCH_JOB = "no such job"


class _Wakes(Protocol):
    def _work_appeared(self) -> None: ...


def _states(states: frozenset[State]) -> list[str]:
    return sorted(s.value for s in states)


class SQLJobActions(SQLHost):
    """Delete, run now and priority, for one job or many (one transaction per call)."""

    def _read_job(self, conn: Conn, job_id: int) -> dict[str, Any] | None:
        rows = self._dicts(conn.execute(self.q["action_job"], {"job_id": job_id}))
        return rows[0] if rows else None

    def run_now(self, job_ids: Sequence[int], actor: str, now: float) -> ActionReport:
        report = ActionReport()
        q = self.q
        fence = {"from_states": self._list(_states(RUN_NOW_FROM)), "now": now}
        with self._write("run_now") as conn:
            for job_id in dict.fromkeys(job_ids):
                row = self._read_job(conn, job_id)
                if row is None:
                    report.refused[job_id] = NO_SUCH_JOB
                    continue
                if State(row["status"]) not in RUN_NOW_FROM:
                    report.refused[job_id] = f"{row['status']}: only a queued job can run now"
                    continue
                old = self._epoch(row["run_at"])
                if old is None or old <= now:
                    report.refused[job_id] = "already due: it runs as soon as a worker is free"
                    continue
                if conn.execute(q["run_job_now"], {**fence, "job_id": job_id}).fetchone() is None:
                    report.refused[job_id] = "it changed meanwhile (claimed or made due)"
                    continue
                report.changed.append(job_id)
                if Event.RESCHEDULED in self._audit:
                    info = detail(old_run_at=iso(old), new_run_at=iso(now))
                    row_ = event_row(job_id, now, Event.RESCHEDULED, actor, info)
                    conn.execute(q["insert_event"], row_)
        if report.changed:
            cast(_Wakes, self)._work_appeared()
        return report

    def set_priority(
        self, job_ids: Sequence[int], priority: int, actor: str, now: float
    ) -> ActionReport:
        report = ActionReport()
        q = self.q
        fence = {"from_states": self._list(_states(REPRIORITIZE_FROM)), "priority": priority}
        with self._write("set_priority") as conn:
            for job_id in dict.fromkeys(job_ids):
                row = self._read_job(conn, job_id)
                if row is None:
                    report.refused[job_id] = NO_SUCH_JOB
                    continue
                if State(row["status"]) not in REPRIORITIZE_FROM:
                    report.refused[job_id] = (
                        f"{row['status']}: only a queued or waiting job can change priority"
                    )
                    continue
                old = int(row["priority"])
                if old == priority:
                    report.refused[job_id] = f"already priority {priority}"
                    continue
                moved = conn.execute(q["set_job_priority"], {**fence, "job_id": job_id})
                if moved.fetchone() is None:
                    report.refused[job_id] = "it changed meanwhile (claimed)"
                    continue
                report.changed.append(job_id)
                if Event.PRIORITY_CHANGED in self._audit:
                    info = detail(old_priority=old, new_priority=priority)
                    row_ = event_row(job_id, now, Event.PRIORITY_CHANGED, actor, info)
                    conn.execute(q["insert_event"], row_)
        if report.changed:
            cast(_Wakes, self)._work_appeared()  # a higher priority may be claimable first
        return report

    def delete_jobs(self, job_ids: Sequence[int], actor: str, now: float) -> ActionReport:
        report = ActionReport()
        q = self.q
        fence = {"from_states": self._list(_states(DELETE_FROM))}
        gone: list[dict[str, Any]] = []
        with self._write("delete") as conn:
            for job_id in dict.fromkeys(job_ids):
                row = self._read_job(conn, job_id)
                if row is None:
                    report.refused[job_id] = NO_SUCH_JOB
                    continue
                if State(row["status"]) not in DELETE_FROM:
                    report.refused[job_id] = f"{row['status']}: cancel it first, then delete it"
                    continue
                if row["waiting_dependent"] is not None:
                    report.refused[job_id] = (
                        f"waiting job #{row['waiting_dependent']} depends on it: its outcome "
                        "decides that job's (cancel or delete that job first)"
                    )
                    continue
                final = row["status"] in FINAL
                if final:  # taken off the figures while the row is there to read
                    figures.uncount(conn, q, [job_id])
                deleted = self._dicts(conn.execute(q["delete_job"], {**fence, "job_id": job_id}))
                if not deleted:
                    if final:
                        raise AssertionError(f"job {job_id} changed inside the delete")
                    report.refused[job_id] = "a waiting job came to depend on it meanwhile"
                    continue
                report.changed.append(job_id)
                if final:
                    gone.extend(deleted)
            if gone:  # a final outcome is history: kept in the hourly rollup, as prune does
                self._roll_up(conn, gone)
        return report
