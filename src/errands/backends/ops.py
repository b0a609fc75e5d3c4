"""Operations verbs — stats, errors, bulk selection, retention, storage, periodic schedules —
written once over named queries (``sql/<dialect>/ops.sql`` and ``periodic.sql``).

``OpsVerbs`` is a mixin for ``SQLBackend`` subclasses and uses only the same hooks
(``q``, ``_write``, ``_read``, ``_list``, ``_epoch``), with positional row access whose column
order each dialect's query file keeps. Dialect differences are queries, not code: SQLite's
``wal_checkpoint`` is ``PRAGMA wal_checkpoint(TRUNCATE)``, PostgreSQL's is a no-op ``SELECT``.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .. import rollup
from ..records import to_datetime
from ..settings import Settings
from ..states import State
from .base import NewJob, PeriodicRow

if TYPE_CHECKING:
    from .sqlbase import Conn, Cursor

FINISHED = (State.SUCCEEDED.value, State.FAILED.value, State.CANCELLED.value)


def iso(epoch: float | None) -> str | None:
    dt = to_datetime(epoch)
    return None if dt is None else dt.isoformat()


@dataclass(slots=True)
class Window:
    """Finished jobs of one (queue, type, outcome) in a time window: rolled-up figures of
    pruned rows plus the exact durations of rows still in the table."""

    rolled: rollup.Figures = field(default_factory=rollup.Figures)
    rows: rollup.Figures = field(default_factory=rollup.Figures)
    waits: list[float] = field(default_factory=list)
    runs: list[float] = field(default_factory=list)

    @property
    def count(self) -> int:
        return self.rolled.count + self.rows.count

    def add_row(self, wait: float | None, run: float | None) -> None:
        self.rows.add(wait, run)
        if wait is not None:
            self.waits.append(max(wait, 0.0))
        if run is not None:
            self.runs.append(max(run, 0.0))

    def merged(self, other: Window) -> Window:
        return Window(
            self.rolled.merged(other.rolled),
            self.rows.merged(other.rows),
            self.waits + other.waits,
            self.runs + other.runs,
        )

    def figures(self) -> rollup.Figures:
        return self.rolled.merged(self.rows)

    def wait_pct(self, p: float) -> float | None:
        cap = max(self.rolled.wait_max, self.rows.wait_max)
        return rollup.percentile(self.waits, self.rolled.wait_hist, cap, p)

    def run_pct(self, p: float) -> float | None:
        cap = max(self.rolled.run_max, self.rows.run_max)
        return rollup.percentile(self.runs, self.rolled.run_hist, cap, p)


class OpsVerbs:
    """Mixin: the operations verbs. Host class supplies the SQLBackend hooks."""

    dialect: str
    q: dict[str, str]
    settings: Settings

    if TYPE_CHECKING:

        def _write(self, name: str) -> contextlib.AbstractContextManager[Conn]: ...
        def _read(self) -> contextlib.AbstractContextManager[Conn]: ...
        def _list(self, values: Sequence[Any]) -> Any: ...
        def _epoch(self, value: Any) -> float | None: ...
        def _insert(
            self, conn: Conn, jobs: Sequence[NewJob], now: float, actor: str
        ) -> list[int]: ...
        def counts(self) -> list[tuple[str, str, str, int]]: ...
        @staticmethod
        def _dicts(cur: Cursor) -> list[dict[str, Any]]: ...

    def _rows(self, name: str, params: dict[str, Any] | None = None) -> list[Any]:
        with self._read() as conn:
            return list(conn.execute(self.q[name], params or {}).fetchall())

    # -- the five questions ----------------------------------------------------------------

    def oldest_running(self, now: float, alive_seconds: float, limit: int) -> list[dict[str, Any]]:
        ep = self._epoch
        out = []
        for r in self._rows("oldest_running", {"limit": limit}):
            since, lease, seen, stopped = ep(r[5]), ep(r[6]), ep(r[7]), ep(r[8])
            out.append(
                {
                    "id": r[0],
                    "queue": r[1],
                    "type": r[2],
                    "attempt": r[3],
                    "worker_id": r[4],
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

    def running_past_lease(self, now: float, grace: float) -> int:
        return int(self._rows("running_past_lease", {"now": now, "grace": grace})[0][0])

    def oldest_due(self, now: float) -> dict[str, Any] | None:
        rows = self._rows("oldest_due", {"now": now})
        if not rows:
            return None
        r = rows[0]
        run_at = self._epoch(r[3]) or now
        return {
            "id": r[0],
            "queue": r[1],
            "type": r[2],
            "run_at": iso(run_at),
            "wait_seconds": round(max(now - run_at, 0.0), 3),
        }

    def retry_histogram(self, since: float) -> dict[str, int]:
        """Attempts used → number of jobs finished since ``since``."""
        return {str(r[0]): int(r[1]) for r in self._rows("retry_histogram", {"since": since})}

    def top_errors(self, since: float, limit: int) -> list[dict[str, Any]]:
        rows = self._rows("top_errors", {"since": since, "limit": limit})
        return [
            {
                "error_code": r[0],
                "type": r[1],
                "count": int(r[2]),
                "last_seen": iso(self._epoch(r[3])),
            }
            for r in rows
        ]

    def window_figures(self, since: float) -> dict[tuple[str, str, str], Window]:
        """Finished jobs per (queue, type, outcome) since ``since``: rolled-up hours that start
        at or after the hour holding ``since`` (pruned data has hour granularity), plus rows."""
        out: dict[tuple[str, str, str], Window] = {}
        ep = self._epoch
        for r in self._rows("rollups_since", {"since": rollup.hour_of(since)}):
            w = out.setdefault((r[1], r[2], r[3]), Window())
            w.rolled = w.rolled.merged(
                rollup.Figures(
                    int(r[4]),
                    float(r[5]),
                    float(r[6]),
                    float(r[7]),
                    float(r[8]),
                    rollup.load(r[9]),
                    rollup.load(r[10]),
                )
            )
        for r in self._rows("finished_since", {"since": since}):
            w = out.setdefault((r[0], r[1], r[2]), Window())
            w.add_row(*rollup.durations(ep(r[3]), ep(r[4]), ep(r[5])))
        return out

    def rollup_totals(self) -> list[tuple[str, str, str, int]]:
        return [(r[0], r[1], r[2], int(r[3])) for r in self._rows("rollup_totals")]

    def queued_types(self) -> list[tuple[str, str, int]]:
        return [(r[0], r[1], int(r[2])) for r in self._rows("queued_types")]

    def live_workers(self, now: float, alive_seconds: float) -> list[dict[str, Any]]:
        ep = self._epoch
        rows = self._rows("workers_seen_since", {"alive_since": now - alive_seconds})
        return [
            {
                "id": r[0],
                "hostname": r[1],
                "pid": r[2],
                "queues": None if r[3] is None else [x for x in r[3].split(",") if x],
                "types": None if r[4] is None else [x for x in r[4].split(",") if x],
                "concurrency": r[5],
                "started_at": iso(ep(r[6])),
                "last_seen_at": iso(ep(r[7])),
            }
            for r in rows
        ]

    def ops_stats(
        self, now: float, *, alive_seconds: float, window: float, top: int, running_limit: int
    ) -> dict[str, Any]:
        """The five questions as one JSON-ready object (see docs/operations.md)."""
        from ..periodic import overdue_reason  # periodic imports base; avoid a cycle at import

        rows = self.counts()
        counts = {s.value: 0 for s in State}
        for status, _, _, n in rows:
            counts[status] = counts.get(status, 0) + n
        workers = self.live_workers(now, alive_seconds)
        hour = summarize(self.window_figures(now - rollup.HOUR), rollup.HOUR)
        unhandled = [
            {"queue": queue, "type": jtype, "queued": n}
            for queue, jtype, n in self.queued_types()
            if not any(_handles(w, queue, jtype) for w in workers)
        ]
        overdue = []
        for p in self.list_periodic():
            reason = overdue_reason(p, now)
            if reason:
                overdue.append({"name": p.name, "type": p.type, "reason": reason})
        return {
            "now": iso(now),
            "counts": counts,
            "by_queue_type": [
                {"status": s, "queue": q, "type": t, "count": n} for s, q, t, n in sorted(rows)
            ],
            "oldest_running": self.oldest_running(now, alive_seconds, running_limit),
            "oldest_due": self.oldest_due(now),
            "retries": {"window_seconds": window, "histogram": self.retry_histogram(now - window)},
            "top_errors": self.top_errors(now - window, top),
            "last_hour": hour,
            "unhandled_types": unhandled,
            "periodic_overdue": overdue,
            "workers": workers,
        }

    # -- bulk selection --------------------------------------------------------------------

    def match_ids(
        self, status: str, *, type: str | None, queue: str | None, error_code: str | None
    ) -> list[int]:
        params = {"status": status, "type": type, "queue": queue, "error_code": error_code}
        return [int(r[0]) for r in self._rows("ids_matching", params)]

    # -- retention -------------------------------------------------------------------------

    def prune_count(self, state: str, cutoff: float) -> int:
        """How many jobs in ``state`` finished before ``cutoff`` (what a prune would delete)."""
        return int(self._rows("prune_count", {"status": state, "cutoff": cutoff})[0][0])

    def prune_batch(self, state: str, cutoff: float, limit: int) -> int:
        """Delete up to ``limit`` jobs in ``state`` that finished before ``cutoff``, oldest
        first, rolling them up into ``job_stats_hourly`` in the same transaction (so a crash
        never leaves a batch half-counted); returns how many. The loop — batches, pacing,
        interruption, checkpoints — is the caller's (errands.retention.Pruner)."""
        params = {"status": state, "cutoff": cutoff, "limit": limit}
        with self._write("prune") as conn:
            rows = conn.execute(self.q["prune_batch"], params).fetchall()
            self._roll_up(conn, rows)
        return len(rows)

    def _roll_up(self, conn: Conn, rows: Sequence[Any]) -> None:
        """Merge deleted rows (queue, type, status, run_at, started_at, finished_at) into
        their hourly rollups. Read-merge-write inside the prune's write transaction."""
        ep = self._epoch
        groups: dict[tuple[float, str, str, str], rollup.Figures] = {}
        for r in rows:
            finished = ep(r[5]) or 0.0
            key = (rollup.hour_of(finished), r[0], r[1], r[2])
            groups.setdefault(key, rollup.Figures()).add(
                *rollup.durations(ep(r[3]), ep(r[4]), finished)
            )
        get, put = self.q["rollup_get"], self.q["rollup_put"]
        for (hour, queue, jtype, outcome), fig in groups.items():
            ident = {"hour": hour, "queue": queue, "type": jtype, "outcome": outcome}
            old = conn.execute(get, ident).fetchone()
            if old is not None:
                fig = fig.merged(
                    rollup.Figures(
                        int(old[0]),
                        float(old[1]),
                        float(old[2]),
                        float(old[3]),
                        float(old[4]),
                        rollup.load(old[5]),
                        rollup.load(old[6]),
                    )
                )
            conn.execute(
                put,
                {
                    **ident,
                    "count": fig.count,
                    "wait_sum": fig.wait_sum,
                    "wait_max": fig.wait_max,
                    "run_sum": fig.run_sum,
                    "run_max": fig.run_max,
                    "wait_hist": rollup.dump(fig.wait_hist),
                    "run_hist": rollup.dump(fig.run_hist),
                },
            )

    def checkpoint(self) -> None:
        """Dialect hook as a query: SQLite truncates its WAL; PostgreSQL does nothing."""
        with self._read() as conn:
            conn.execute(self.q["wal_checkpoint"], {}).fetchall()

    def vacuum(self) -> dict[str, int | None]:
        """Rebuild the database to give free pages back (locks it: run off-peak)."""
        before = self.storage()
        with self._read() as conn:
            conn.execute(self.q["vacuum"], {})
        self.checkpoint()
        after = self.storage()
        return {
            "bytes_before": before["bytes"],
            "bytes_after": after["bytes"],
            "wal_bytes": after["wal_bytes"],
        }

    def storage(self) -> dict[str, int | None]:
        row = self._rows("db_size")[0]
        return {
            "bytes": int(row[0]),
            "free_bytes": None if row[1] is None else int(row[1]),
            "wal_bytes": self._wal_bytes(),
        }

    def _wal_bytes(self) -> int | None:
        if self.dialect != "sqlite":
            return None
        path = str(getattr(self, "path", ""))
        try:
            return os.path.getsize(path + "-wal")
        except OSError:
            return 0  # no WAL file: nothing waiting to be checkpointed

    # -- periodic schedules ----------------------------------------------------------------

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
        out = []
        for r in self._rows("list_periodic"):
            payload = r[5] if isinstance(r[5], str) else _json_text(r[5])
            out.append(
                PeriodicRow(
                    name=r[0],
                    cron=r[1],
                    interval_seconds=None if r[2] is None else float(r[2]),
                    timezone=r[3],
                    type=r[4],
                    payload=payload,
                    queue=r[6],
                    last_enqueued_at=ep(r[7]),
                    next_run_at=ep(r[8]),
                    last_succeeded_at=ep(r[9]) or None,  # 0: never
                    catch_up=r[10],
                    grace_seconds=None if r[11] is None else float(r[11]),
                    stored_succeeded_at=ep(r[12]),
                    next_run_raw=r[8],
                )
            )
        return out

    def fire_periodic(
        self, row: PeriodicRow, next_run_at: float, job: NewJob | None, now: float
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

    def record_periodic_success(self, name: str, succeeded_at: float) -> None:
        with self._write("periodic_success") as conn:
            conn.execute(
                self.q["record_periodic_success"], {"name": name, "succeeded_at": succeeded_at}
            )


def summarize(figures: dict[tuple[str, str, str], Window], window: float) -> dict[str, Any]:
    """Throughput, failure rate and wait/run p50/p95 over every group of a window."""
    total = Window()
    outcomes = {s: 0 for s in FINISHED}
    for (_, _, outcome), w in figures.items():
        total = total.merged(w)
        outcomes[outcome] = outcomes.get(outcome, 0) + w.count
    n = total.count
    failed = outcomes.get(State.FAILED.value, 0)
    return {
        "window_seconds": window,
        "processed": n,
        **outcomes,
        "per_minute": round(n / (window / 60.0), 3),
        "failure_rate": round(failed / n, 4) if n else 0.0,
        "wait_p50": _round(total.wait_pct(0.5)),
        "wait_p95": _round(total.wait_pct(0.95)),
        "run_p50": _round(total.run_pct(0.5)),
        "run_p95": _round(total.run_pct(0.95)),
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _handles(worker: dict[str, Any], queue: str, jtype: str) -> bool:
    queues, types = worker["queues"], worker["types"]
    # A worker registered without types (an older errands) may handle anything: no alarm.
    return (queues is None or queue in queues) and (types is None or jtype in types)


def _json_text(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))
