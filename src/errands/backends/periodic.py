"""The periodic noun: schedule rows and the compare-and-set that fires each tick once.

Queries: ``periodic.sql``. Firing a tick enqueues its job in the same transaction, through
the jobs noun's insert (``JobInserter``), so a crash between the two can never lose the job.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any, Protocol

from .activity import write_audit
from .base import Audit, NewJob, PeriodicRow
from .host import Conn, SQLHost, as_text


class JobInserter(Protocol):
    """What firing a tick needs of its host beyond ``SQLHost``: the jobs noun's insert,
    inside a transaction of ours (``jobs.SQLJobs._insert``, which a dialect may specialise)."""

    q: dict[str, str]

    def _write(self, name: str) -> contextlib.AbstractContextManager[Conn]: ...
    def _insert(self, conn: Conn, jobs: Sequence[NewJob], now: float, actor: str) -> list[int]: ...


class SQLPeriodic(SQLHost):
    """Schedules: written by the code that declares them, fired by the scheduler."""

    def upsert_periodic(self, row: PeriodicRow) -> None:
        params = {
            "name": row.name,
            "cron": row.cron,
            "interval_seconds": row.interval_seconds,
            "timezone": row.timezone,
            "type": row.type,
            "payload": row.payload,
            "queue": row.queue,
            "next_run_at": row.next_run_at,
            "catch_up": row.catch_up,
            "grace_seconds": row.grace_seconds,
        }
        with self._write("upsert_periodic") as conn:
            conn.execute(self.q["upsert_periodic"], params)

    def list_periodic(self) -> list[PeriodicRow]:
        ep = self._epoch
        return [
            PeriodicRow(
                name=r["name"],
                cron=r["cron"],
                interval_seconds=_float(r["interval_seconds"]),
                timezone=r["timezone"],
                type=r["type"],
                payload=as_text(r["payload"]),
                queue=r["queue"],
                last_enqueued_at=ep(r["last_enqueued_at"]),
                next_run_at=ep(r["next_run_at"]),
                last_succeeded_at=ep(r["last_succeeded_at"]) or None,  # 0: never
                catch_up=r["catch_up"],
                grace_seconds=_float(r["grace_seconds"]),
                stored_succeeded_at=ep(r["stored_succeeded_at"]),
                next_run_raw=r["next_run_at"],
                first_enqueued_at=ep(r["first_enqueued_at"]),
                disabled_at=ep(r["disabled_at"]),
                disabled_by=r["disabled_by"],
                enabled_at=ep(r["enabled_at"]),
            )
            for r in self._fetch("list_periodic")
        ]

    def fire_periodic(
        self: JobInserter, row: PeriodicRow, next_run_at: float, job: NewJob | None, now: float
    ) -> tuple[bool, int | None]:
        """Compare-and-set ``next_run_at`` from the value read to the next tick and, if this
        caller won, insert the job — one transaction, so each tick enqueues at most once ever,
        and never loses its job to a crash between the two."""
        params = {
            "name": row.name,
            "expected": row.next_run_raw,
            "next_run_at": next_run_at,
            "now": now,
            "enqueued": 1 if job is not None else 0,
        }
        with self._write("periodic") as conn:
            if conn.execute(self.q["advance_periodic"], params).fetchone() is None:
                return False, None
            if job is None:
                return True, None
            (job_id,) = self._insert(conn, [job], now, "system")
            return True, job_id

    def remove_periodic(self, name: str, *, audit: Audit | None = None) -> bool:
        """Delete a schedule's row; False if there was none."""
        with self._write("remove_periodic") as conn:
            gone = conn.execute(self.q["remove_periodic"], {"name": name}).fetchone() is not None
            write_audit(conn, self.q, audit, gone)
            return gone

    def disable_periodic(
        self, name: str, actor: str, now: float, *, audit: Audit | None = None
    ) -> bool | None:
        """Disable a schedule (the scheduler enqueues none of its ticks until it is enabled);
        True if this disabled it, False if it already was, None if there is no such schedule."""
        with self._write("periodic_disable") as conn:
            params = {"name": name, "actor": actor, "now": now}
            done = conn.execute(self.q["disable_periodic"], params).fetchone() is not None
            found = True if done else _exists(conn, self.q, name)
            write_audit(conn, self.q, audit, found)
            return found

    def enable_periodic(
        self, name: str, next_run_at: float, now: float, *, audit: Audit | None = None
    ) -> bool | None:
        """Enable a disabled schedule, its next tick at ``next_run_at`` (the first after now:
        skipped ticks are not caught up); True if this enabled it, False if it was not
        disabled, None if there is no such schedule."""
        with self._write("periodic_enable") as conn:
            params = {"name": name, "next_run_at": next_run_at, "now": now}
            done = conn.execute(self.q["enable_periodic"], params).fetchone() is not None
            found = True if done else _exists(conn, self.q, name)
            write_audit(conn, self.q, audit, found)
            return found

    def run_periodic(
        self: JobInserter,
        name: str,
        job: NewJob,
        actor: str,
        now: float,
        *,
        audit: Audit | None = None,
    ) -> int | None:
        """Enqueue one run of a schedule now, outside its ticks (its own next tick is not
        moved), as ``actor`` — in one transaction with the check that the schedule exists;
        None if it does not."""
        with self._write("periodic_run") as conn:
            if _exists(conn, self.q, name) is None:
                return None
            (job_id,) = self._insert(conn, [job], now, actor)
            write_audit(conn, self.q, audit, job_id)
            return job_id

    def record_periodic_success(self, name: str, succeeded_at: float) -> None:
        with self._write("periodic_success") as conn:
            conn.execute(
                self.q["record_periodic_success"], {"name": name, "succeeded_at": succeeded_at}
            )


def _exists(conn: Conn, q: dict[str, str], name: str) -> bool | None:
    """False if the schedule exists, None if not (the verbs' "nothing changed" answers)."""
    return False if conn.execute(q["periodic_exists"], {"name": name}).fetchone() else None


def _float(value: Any) -> float | None:
    return None if value is None else float(value)
