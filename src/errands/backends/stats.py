"""The stats noun: typed rows and small dicts for ``errands.reports`` (which shapes
the user's ``stats``), the metrics and the dashboard. Reads only, each one query.

Queries: ``ops.sql`` and ``series.sql``. The counts of finished jobs come from kept figures
(``job_counts``, ``job_stats_minutely``), never from a scan of finished rows, except where a
window reaches past the minutes kept.
"""

from __future__ import annotations

from typing import Any

from ..core import rollup
from .base import StateCount, TypeHour, WindowRow
from .host import SQLHost, iso


class SQLStats(SQLHost):
    """What the queue holds and what it did, by state, queue, type and window."""

    def state_counts(self) -> list[StateCount]:
        """Jobs per state, queue and type: queued and running counted live (index ranges),
        final states from the kept ``job_counts`` — never a scan of finished rows."""
        return [
            StateCount(r["status"], r["queue"], r["type"], int(r["count"]))
            for r in self._fetch("state_counts")
        ]

    def window_rows(self, since: float) -> list[WindowRow]:
        """Every measure per queue and bucket over the minutes starting at or after the minute
        holding ``since`` (``job_stats_minutely``, kept by errands' writes)."""
        rows = self._fetch("window_rows", {"since": rollup.minute_of(since)})
        return [
            WindowRow(
                measure=r["measure"],
                queue=r["queue"],
                bucket=int(r["bucket"]),
                count=int(r["count"]),
                total=float(r["total"]),
                maximum=float(r["maximum"]),
            )
            for r in rows
        ]

    def hourly_outcomes(
        self, since: float, queue: str | None = None
    ) -> list[tuple[float, str, int]]:
        """(hour start, outcome, jobs) for every hour since ``since`` that has finished jobs
        (series.sql), of every queue or of ``queue``: hours the minute figures cover whole
        from them, older ones from live rows plus the rollup of pruned ones."""
        if queue is None:
            rows = self._fetch("hourly_outcomes", {"since": since})
        else:
            rows = self._fetch("hourly_outcomes_of_queue", {"since": since, "queue": queue})
        return [(self._epoch(r["hour"]) or 0.0, str(r["outcome"]), int(r["n"])) for r in rows]

    def hourly_of_type(self, since: float, jtype: str, queue: str | None) -> list[TypeHour]:
        """The hours since ``since`` of one job type (and ``queue``, when given): from the
        finished rows still in ``jobs`` plus the hourly rollup of pruned ones, which count
        the same (each finished job once: its outcome, the wait and run of its last attempt),
        so an hour reads the same before and after it is pruned. Costs a range of the rows of
        that type in the window (series.sql: ``hourly_of_type``)."""
        params = {"since": since, "type": jtype, "queue": queue}
        out = []
        for r in self._fetch("hourly_of_type", params):
            n = int(r["n"])
            wait, run = rollup.empty(), rollup.empty()
            if r["wait_bucket"] is not None:
                wait[int(r["wait_bucket"])] += n
            if r["run_bucket"] is not None:
                run[int(r["run_bucket"])] += n
            out.append(
                TypeHour(
                    self._epoch(r["hour"]) or 0.0,
                    str(r["outcome"]),
                    n,
                    wait,
                    run,
                    float(r["wait_max"] or 0.0),
                    float(r["run_max"] or 0.0),
                )
            )
        for r in self._fetch("hourly_rollup_of_type", params):
            out.append(
                TypeHour(
                    self._epoch(r["hour"]) or 0.0,
                    str(r["outcome"]),
                    int(r["n"]),
                    rollup.load(r["wait_hist"]),
                    rollup.load(r["run_hist"]),
                    float(r["wait_max"] or 0.0),
                    float(r["run_max"] or 0.0),
                )
            )
        return out

    def hourly_latency(
        self, since: float, queue: str | None = None
    ) -> list[tuple[float, str, int, int, float]]:
        """(hour start, ``wait`` | ``run``, bucket, count, maximum) since ``since``, of every
        queue or of ``queue`` (the minute figures: every attempt's run)."""
        if queue is None:
            rows = self._fetch("hourly_latency", {"since": since})
        else:
            rows = self._fetch("hourly_latency_of_queue", {"since": since, "queue": queue})
        return [
            (
                self._epoch(r["hour"]) or 0.0,
                str(r["measure"]),
                int(r["bucket"]),
                int(r["count"]),
                float(r["maximum"]),
            )
            for r in rows
        ]

    def rollup_totals(self) -> list[tuple[str, str, str, int]]:
        return [
            (r["queue"], r["type"], r["outcome"], int(r["n"])) for r in self._fetch("rollup_totals")
        ]

    def queued_types(self) -> list[tuple[str, str, int]]:
        return [(r["queue"], r["type"], int(r["n"])) for r in self._fetch("queued_types")]

    def retry_histogram(self, since: float, now: float | None = None) -> dict[str, int]:
        """Attempts used → number of jobs finished since ``since`` (from the minute of
        ``since``). Within ``rollup.MINUTES_KEPT`` of ``now`` this sums minute rows; further
        back it counts the rows still in ``jobs`` (exact, but a scan of the window)."""
        if now is not None and now - since <= rollup.MINUTES_KEPT:
            rows = self._fetch("attempts_used_since", {"since": rollup.minute_of(since)})
            return {str(r["bucket"]): int(r["count"]) for r in rows}
        rows = self._fetch("retry_histogram", {"since": since})
        return {str(r["attempts"]): int(r["n"]) for r in rows}

    def top_errors(
        self, since: float, limit: int, now: float | None = None
    ) -> list[dict[str, Any]]:
        """The most frequent error codes since ``since`` (from the minute of ``since``). Within
        ``rollup.MINUTES_KEPT`` of ``now`` from the minute figures and the unfinished jobs'
        index (bounded by groups); further back from the rows still in ``jobs``."""
        if now is not None and now - since <= rollup.MINUTES_KEPT:
            params = {"since": rollup.minute_of(since), "limit": limit}
            rows = self._fetch("top_errors", params)
        else:
            rows = self._fetch("top_errors_in_rows", {"since": since, "limit": limit})
        return [
            {
                "error_code": r["error_code"],
                "type": r["type"],
                "count": int(r["n"]),
                "last_seen": iso(self._epoch(r["last_seen"])),
            }
            for r in rows
        ]

    def running_past_lease(self, now: float, grace: float) -> int:
        return int(self._value("running_past_lease", {"now": now, "grace": grace}, "n"))

    def snoozing_jobs(self, min_attempts: int, limit: int) -> list[dict[str, Any]]:
        """Queued jobs started at least ``min_attempts`` times whose latest attempt snoozed
        (id, type, attempts; most attempts first): a handler snoozing in a loop."""
        return self._fetch("snoozing_jobs", {"min_attempts": min_attempts, "limit": limit})

    def oldest_due(self, now: float) -> dict[str, Any] | None:
        rows = self._fetch("oldest_due", {"now": now})
        if not rows:
            return None
        r = rows[0]
        run_at = self._epoch(r["run_at"]) or now
        return {
            "id": r["id"],
            "queue": r["queue"],
            "type": r["type"],
            "run_at": iso(run_at),
            "wait_seconds": round(max(now - run_at, 0.0), 3),
        }

    def error_sample(self, error_code: str, jtype: str) -> dict[str, Any] | None:
        """The newest finished job of an error group: ``id``, ``attempts``, ``error_detail``."""
        rows = self._fetch("error_sample", {"error_code": error_code, "type": jtype})
        if not rows:
            return None
        r = rows[0]
        return {
            "id": int(r["id"]),
            "attempts": int(r["attempts"]),
            "error_detail": r["error_detail"],
        }

    def oldest_due_by_queue(self, now: float) -> dict[str, dict[str, Any]]:
        """Queue -> its due queued jobs (``due``) and the longest wait (``wait_seconds``)."""
        out = {}
        for r in self._fetch("oldest_due_by_queue", {"now": now}):
            run_at = self._epoch(r["run_at"]) or now
            out[str(r["queue"])] = {
                "due": int(r["due"]),
                "wait_seconds": round(max(now - run_at, 0.0), 3),
            }
        return out

    def oldest_running(self, now: float, alive_seconds: float, limit: int) -> list[dict[str, Any]]:
        ep = self._epoch
        out = []
        for r in self._fetch("oldest_running", {"limit": limit}):
            since, lease = ep(r["since"]), ep(r["lease_expires_at"])
            seen, stopped = ep(r["last_seen_at"]), ep(r["stopped_at"])
            out.append(
                {
                    "id": r["id"],
                    "queue": r["queue"],
                    "type": r["type"],
                    "attempt": r["attempts"],
                    "worker_id": r["worker_id"],
                    "since": iso(since),
                    "age_seconds": None if since is None else round(now - since, 3),
                    "lease_expires_at": iso(lease),
                    "past_lease": lease is not None and lease < now,
                    "worker_alive": seen is not None
                    and stopped is None
                    and seen >= now - alive_seconds,
                }
            )
        return out
