"""The jobs noun, the operator's edits that are not transitions: delete, run now, priority.

Queries: ``actions.sql``. Each verb takes a chunk of ids in one write transaction and a few
statements whatever their number: it reads the jobs (``action_jobs``; locked in id order on
PostgreSQL, so a claim skips them until the edit commits), decides from what it read why it
refuses each one it does, then applies the edit to the rest with one statement fenced on the
jobs' state (``core.states``: ``RUN_NOW_FROM``, ``REPRIORITIZE_FROM``, ``DELETE_FROM``) and
writes their events in one more. So a worker's claim or outcome is never lost to an edit:
whichever commits first, the other sees it (SQLite: one writer at a time; PostgreSQL: the row
locks and the fence).

- run now: a queued job with a ``run_at`` ahead of ``now`` gets ``run_at = now``
  (``RESCHEDULED``, detail: the old and new ``run_at``); idle workers are woken.
- priority: a queued or waiting job gets the new priority (``PRIORITY_CHANGED``, detail: old
  and new).
- delete: any job but a running one (cancel it first), and never one a waiting job depends on
  (its outcome decides the waiting job's: docs/pipelines.md, as prune). Its attempts, events
  and edges go with it (ON DELETE CASCADE), so it leaves no event; a final job's outcome is
  taken off the figures and kept in the hourly rollup first, as prune does, so finished-job
  counters never go down. The callers log each delete (who, which ids).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..core.states import DELETE_FROM, REPRIORITIZE_FROM, RUN_NOW_FROM, TERMINAL, Event, State
from ..errors import InvalidTransitionError
from . import figures
from .activity import write_audit
from .base import ActionReport, Audit
from .host import WORK, Conn, SQLHost, detail, dumps, iso

FINAL = frozenset(s.value for s in TERMINAL)
NO_SUCH_JOB = "no such job"


def _states(states: frozenset[State]) -> list[str]:
    return sorted(s.value for s in states)


class SQLJobActions(SQLHost):
    """Delete, run now and priority, for one job or many (one transaction per call)."""

    def _read_jobs(
        self, conn: Conn, job_ids: Sequence[int], report: ActionReport
    ) -> list[dict[str, Any]]:
        """The named jobs that exist (locked on PostgreSQL), in id order; the others are
        refused as no such job."""
        params = {"job_ids": self._list(sorted(set(job_ids)))}
        rows = self._dicts(conn.execute(self.q["action_jobs"], params))
        found = {int(r["id"]) for r in rows}
        for job_id in job_ids:
            if job_id not in found:
                report.refused[job_id] = NO_SUCH_JOB
        return rows

    def _events(self, conn: Conn, rows: list[list[Any]], event: Event) -> None:
        if rows and event in self._audit:
            conn.execute(self.q["insert_events"], {"rows": dumps(rows)})

    def run_now(
        self, job_ids: Sequence[int], actor: str, now: float, *, audit: Audit | None = None
    ) -> ActionReport:
        report = ActionReport()
        q = self.q
        with self._write("run_now") as conn:
            old: dict[int, float] = {}
            for row in self._read_jobs(conn, job_ids, report):
                job_id, run_at = int(row["id"]), self._epoch(row["run_at"])
                if State(row["status"]) not in RUN_NOW_FROM:
                    report.refused[job_id] = f"{row['status']}: only a queued job can run now"
                elif run_at is None or run_at <= now:
                    report.refused[job_id] = "already due: it runs as soon as a worker is free"
                else:
                    old[job_id] = run_at
            if old:
                params = {
                    "job_ids": self._list(sorted(old)),
                    "from_states": self._list(_states(RUN_NOW_FROM)),
                    "now": now,
                }
                moved = {int(r[0]) for r in conn.execute(q["run_jobs_now"], params).fetchall()}
                events = []
                for job_id in _in_order(job_ids, old):
                    if job_id not in moved:  # cannot happen: the rows are locked (or SQLite)
                        report.refused[job_id] = "it changed meanwhile (claimed or made due)"
                        continue
                    report.changed.append(job_id)
                    info = detail(old_run_at=iso(old[job_id]), new_run_at=iso(now))
                    events.append([job_id, now, Event.RESCHEDULED.value, actor, info])
                self._events(conn, events, Event.RESCHEDULED)
            if report.changed:
                self._woke(conn, WORK)
            write_audit(conn, q, audit, report)
        return report

    def set_priority(
        self,
        job_ids: Sequence[int],
        priority: int,
        actor: str,
        now: float,
        *,
        audit: Audit | None = None,
    ) -> ActionReport:
        report = ActionReport()
        q = self.q
        with self._write("set_priority") as conn:
            old: dict[int, int] = {}
            for row in self._read_jobs(conn, job_ids, report):
                job_id = int(row["id"])
                if State(row["status"]) not in REPRIORITIZE_FROM:
                    report.refused[job_id] = (
                        f"{row['status']}: only a queued or waiting job can change priority"
                    )
                elif int(row["priority"]) == priority:
                    report.refused[job_id] = f"already priority {priority}"
                else:
                    old[job_id] = int(row["priority"])
            if old:
                params = {
                    "job_ids": self._list(sorted(old)),
                    "from_states": self._list(_states(REPRIORITIZE_FROM)),
                    "priority": priority,
                }
                moved = {int(r[0]) for r in conn.execute(q["set_jobs_priority"], params)}
                events = []
                for job_id in _in_order(job_ids, old):
                    if job_id not in moved:
                        report.refused[job_id] = "it changed meanwhile (claimed)"
                        continue
                    report.changed.append(job_id)
                    info = detail(old_priority=old[job_id], new_priority=priority)
                    events.append([job_id, now, Event.PRIORITY_CHANGED.value, actor, info])
                self._events(conn, events, Event.PRIORITY_CHANGED)
            if report.changed:
                self._woke(conn, WORK)  # a higher priority may be claimable first
            write_audit(conn, q, audit, report)
        return report

    def delete_jobs(
        self, job_ids: Sequence[int], actor: str, now: float, *, audit: Audit | None = None
    ) -> ActionReport:
        report = ActionReport()
        q = self.q
        with self._write("delete") as conn:
            doomed: dict[int, bool] = {}  # id -> final
            rows = self._read_jobs(conn, job_ids, report)
            needed: dict[int, int] = {}
            if rows:
                params = {"job_ids": self._list([int(r["id"]) for r in rows])}
                needed = {
                    int(r["id"]): int(r["waiting_dependent"])
                    for r in self._dicts(conn.execute(q["waiting_dependents"], params))
                }
            for row in rows:
                job_id = int(row["id"])
                if State(row["status"]) not in DELETE_FROM:
                    report.refused[job_id] = f"{row['status']}: cancel it first, then delete it"
                elif job_id in needed:
                    report.refused[job_id] = (
                        f"waiting job #{needed[job_id]} depends on it: its outcome "
                        "decides that job's (cancel or delete that job first)"
                    )
                else:
                    doomed[job_id] = row["status"] in FINAL
            if doomed:
                # The final ones' outcomes taken off the figures while the rows are there.
                figures.uncount(conn, q, sorted(i for i, final in doomed.items() if final))
                params = {
                    "job_ids": self._list(sorted(doomed)),
                    "from_states": self._list(_states(DELETE_FROM)),
                }
                gone = self._dicts(conn.execute(q["delete_jobs"], params))
                deleted = {int(r["id"]) for r in gone}
                for job_id in _in_order(job_ids, doomed):
                    if job_id in deleted:
                        report.changed.append(job_id)
                    else:
                        # Locked, and an enqueue cannot add an edge to it until we commit; only
                        # a retry elsewhere reviving a job that waits for it could (PostgreSQL).
                        # Its outcome is uncounted already: undo the whole chunk.
                        raise InvalidTransitionError(
                            f"job {job_id} came to have a waiting job depending on it during "
                            "the delete; nothing in this batch was deleted: try again"
                        )
                # A final outcome is history: kept in the hourly rollup, as prune does.
                final = [r for r in gone if r["status"] in FINAL]
                if final:
                    self._roll_up(conn, final)
            write_audit(conn, q, audit, report)
        return report


def _in_order(job_ids: Sequence[int], chosen: dict[int, Any]) -> list[int]:
    """The chosen ids in the order the caller gave them, each once."""
    return [i for i in dict.fromkeys(job_ids) if i in chosen]
