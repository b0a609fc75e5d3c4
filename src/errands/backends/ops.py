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
from typing import TYPE_CHECKING, Any

from .. import rollup
from ..records import to_datetime
from ..settings import Settings
from ..states import State
from .base import NewJob, PeriodicRow, StateCount, WindowRow

if TYPE_CHECKING:
    from .sqlbase import Conn, Cursor

FINISHED = (State.SUCCEEDED.value, State.FAILED.value, State.CANCELLED.value)


def iso(epoch: float | None) -> str | None:
    dt = to_datetime(epoch)
    return None if dt is None else dt.isoformat()


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

    def retry_histogram(self, since: float, now: float | None = None) -> dict[str, int]:
        """Attempts used → number of jobs finished since ``since`` (from the minute of
        ``since``). Within ``rollup.MINUTES_KEPT`` of ``now`` this sums minute rows; further
        back it counts the rows still in ``jobs`` (exact, but a scan of the window)."""
        if now is not None and now - since <= rollup.MINUTES_KEPT:
            rows = self._rows("attempts_used_since", {"since": rollup.minute_of(since)})
        else:
            rows = self._rows("retry_histogram", {"since": since})
        return {str(r[0]): int(r[1]) for r in rows}

    def top_errors(
        self, since: float, limit: int, now: float | None = None
    ) -> list[dict[str, Any]]:
        """The most frequent error codes since ``since`` (from the minute of ``since``). Within
        ``rollup.MINUTES_KEPT`` of ``now`` from the minute figures and the unfinished jobs'
        index (bounded by groups); further back from the rows still in ``jobs``."""
        if now is not None and now - since <= rollup.MINUTES_KEPT:
            params = {"since": rollup.minute_of(since), "limit": limit}
            rows = self._rows("top_errors", params)
        else:
            rows = self._rows("top_errors_in_rows", {"since": since, "limit": limit})
        return [
            {
                "error_code": r[0],
                "type": r[1],
                "count": int(r[2]),
                "last_seen": iso(self._epoch(r[3])),
            }
            for r in rows
        ]

    def state_counts(self) -> list[StateCount]:
        """Jobs per state, queue and type: queued and running counted live (index ranges),
        final states from the trigger-kept ``job_counts`` — never a scan of finished rows."""
        return [StateCount(r[0], r[1], r[2], int(r[3])) for r in self._rows("state_counts")]

    def window_rows(self, since: float) -> list[WindowRow]:
        """Every measure per queue and bucket over the minutes starting at or after the minute
        holding ``since`` (``job_stats_minutely``, kept by triggers)."""
        rows = self._rows("window_rows", {"since": rollup.minute_of(since)})
        return [WindowRow(r[0], r[1], int(r[2]), int(r[3]), float(r[4]), float(r[5])) for r in rows]

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

    def tidy_figures(self, now: float) -> None:
        """Drop minute figures older than ``rollup.MINUTES_KEPT`` and fold PostgreSQL's
        per-connection counter shards into shard 0 (SQLite: shard 0 only), so readers sum few
        rows; and drop a stale batch mark (batch_figures.py), which a crash cannot leave but
        which would silence the triggers. Each is one short transaction that never waits on
        a worker's."""
        cutoff = {"cutoff": rollup.minute_of(now - rollup.MINUTES_KEPT)}
        before = {"before": rollup.minute_of(now) - 2 * rollup.MINUTE}
        for name, params in (
            ("forget_minutes", cutoff),
            ("fold_count_shards", {}),
            ("forget_error_minutes", cutoff),
            ("fold_minute_shards", before),
            ("forget_batch_marks", {}),
        ):
            with self._write("prune") as conn:
                conn.execute(self.q[name], params)

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


def _json_text(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))
