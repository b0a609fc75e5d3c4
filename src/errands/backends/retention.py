"""The retention noun: what the Pruner (``errands.maintenance.pruner``) runs its loop over, and
storage upkeep.

Queries: ``ops.sql``. Dialect differences are queries and hooks, not branches: SQLite's
``wal_checkpoint`` is ``PRAGMA wal_checkpoint(TRUNCATE)``, PostgreSQL's a no-op ``SELECT``;
the WAL file's size is the ``_wal_bytes`` hook (SQLite only), and ``_no_wait`` lets a
checkpoint give up at once rather than wait out the busy timeout (SQLite only).
"""

from __future__ import annotations

import json

from ..core import rollup
from . import figures
from .activity import write_audit
from .base import Audit
from .host import SQLHost


class SQLRetention(SQLHost):
    """Delete finished jobs in batches (rolled up first), tidy the figures, reclaim space."""

    def prune_count(self, state: str, cutoff: float, *, now: float) -> int:
        """How many jobs in ``state`` finished before ``cutoff`` (what a prune would delete);
        a succeeded job whose ``unique_for`` still holds its key at ``now`` is kept."""
        params = {"status": state, "cutoff": cutoff, "now": now}
        return int(self._value("prune_count", params, "n"))

    def prune_batch(
        self, state: str, cutoff: float, limit: int, *, now: float, audit: Audit | None = None
    ) -> int:
        """Delete up to ``limit`` jobs in ``state`` that finished before ``cutoff``, oldest
        first, rolling them up into ``job_stats_hourly`` in the same transaction (so a crash
        never leaves a batch half-counted); returns how many. The loop — batches, pacing,
        interruption, checkpoints — is the caller's (errands.maintenance.Pruner). A job
        whose ``unique_for`` still holds its key at ``now`` stays: the hold outlives retention.
        ``audit``: an operator's prune, whose activity row a batch that deletes writes too."""
        params = {"status": state, "cutoff": cutoff, "limit": limit, "now": now}
        q = self.q
        with self._write("prune") as conn:
            ids = [r[0] for r in conn.execute(q["prune_ids"], params).fetchall()]
            if not ids:
                return 0
            # Taken off the figures while the rows are there to read (figures.py).
            figures.uncount(conn, q, ids)
            doomed = {"job_ids": json.dumps(ids)}
            rows = self._dicts(conn.execute(q["prune_batch"], doomed))
            self._roll_up(conn, rows)
            write_audit(conn, q, audit, len(rows))
        return len(rows)

    def tidy_figures(self, now: float) -> None:
        """Drop minute figures older than ``rollup.MINUTES_KEPT`` and fold PostgreSQL's
        per-connection counter shards into shard 0 (SQLite: shard 0 only), so readers sum few
        rows. Each is one short transaction that never waits on a worker's."""
        cutoff = {"cutoff": rollup.minute_of(now - rollup.MINUTES_KEPT)}
        before = {"before": rollup.minute_of(now) - 2 * rollup.MINUTE}
        for name, params in (
            ("forget_minutes", cutoff),
            ("fold_count_shards", {}),
            ("forget_error_minutes", cutoff),
            ("fold_minute_shards", before),
        ):
            with self._write("prune") as conn:
                conn.execute(self.q[name], params)

    def recount_figures(self, now: float) -> None:
        """Rebuild the figures from the rows in one transaction (figures.py: recount): the
        minute figures from ``rollup.MINUTES_KEPT`` ago, the counts and error minutes whole."""
        since = rollup.minute_of(now - rollup.MINUTES_KEPT)
        with self._write("recount") as conn:
            figures.recount(conn, self.q, since)

    def checkpoint(self, *, wait: bool = True) -> bool:
        """Dialect hook as a query: SQLite folds its WAL back and truncates it; PostgreSQL
        does nothing. True when that completed; False when a connection still needs the
        WAL (a read transaction open on an older snapshot, or a writer) — with
        ``wait=False`` that is answered at once instead of after the busy timeout, so a
        worker's control loop can try it on a timer."""
        with self._read() as conn, self._no_wait(conn, not wait):
            (row,) = self._dicts(conn.execute(self.q["wal_checkpoint"], {}))
        return not row["busy"]

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
        row = self._fetch("db_size")[0]
        return {
            "bytes": int(row["bytes"]),
            "free_bytes": None if row["free_bytes"] is None else int(row["free_bytes"]),
            "wal_bytes": self._wal_bytes(),
        }
