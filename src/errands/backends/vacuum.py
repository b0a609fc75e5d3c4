"""The vacuum noun (PostgreSQL's dead tuples and xmin horizon): what ``stats``, ``check``,
the metrics and the dashboard read, and what the ``vacuum`` maintenance service
(errands.maintenance.vacuum) runs.

Queries: ``vacuum.sql``. Each claim and each outcome replaces a row of ``jobs`` (and writes
``job_attempts``, the figures…); the old versions stay as dead tuples until VACUUM reclaims
them, and VACUUM reclaims only what no open snapshot can still see. SQLite keeps neither dead
tuples nor a horizon: its reads return no rows, and its vacuum of a table only refreshes the
planner's statistics.
"""

from __future__ import annotations

from typing import Any

from . import sql as sql_files
from .base import HorizonHolder, TableHealth
from .host import SQLHost


def errands_tables(dialect: str) -> tuple[str, ...]:
    """The unprefixed names of every table errands' migrations create, and its migrations
    table: the tables these reads look at and the service may vacuum."""
    made = (name for kind, name in sql_files.created_objects(dialect) if kind == "table")
    return tuple(sorted({*made, sql_files.MIGRATIONS_TABLE}))


class SQLVacuum(SQLHost):
    """Dead tuples per table, what holds the horizon, and a plain VACUUM of one table."""

    prefix: str  # the table prefix in use (schema.py)

    def _table_names(self) -> list[str]:
        return [self.prefix + name for name in errands_tables(self.dialect)]

    def table_health(self) -> list[TableHealth]:
        """Errands' tables, most dead tuples first (none on SQLite)."""
        rows = self._fetch("table_health", {"tables": self._list(self._table_names())})
        return [
            TableHealth(
                name=str(r["table_name"]),
                live_tuples=int(r["live_tuples"]),
                dead_tuples=int(r["dead_tuples"]),
                last_vacuum_at=self._epoch(r["last_vacuum_at"]),
                last_autovacuum_at=self._epoch(r["last_autovacuum_at"]),
                autovacuum_on=bool(r["autovacuum_on"]),
                bytes=int(r["bytes"]),
            )
            for r in rows
        ]

    def horizon_holders(self, *, limit: int = 20) -> list[HorizonHolder]:
        """What holds this database's xmin horizon, oldest (in transactions) first; errands'
        own transactions last milliseconds and show only while they run (none on SQLite)."""
        return [_holder(r, self._epoch) for r in self._fetch("horizon_holders", {"limit": limit})]

    def vacuum_leader(self, now: float) -> str | None:
        """The worker whose maintenance runs the ``vacuum`` service now (its lease is live),
        or None: nothing of errands' reclaims dead tuples if the server's autovacuum does not."""
        rows = self._fetch("vacuum_leader", {"now": now})
        return str(rows[0]["holder"]) if rows else None

    def vacuum_table(self, name: str) -> None:
        """A plain VACUUM (ANALYZE) of one of errands' tables (``name`` as ``table_health``
        gives it, with the prefix): no exclusive lock, on an autocommit connection (VACUUM
        refuses a transaction block)."""
        if name not in self._table_names():
            raise ValueError(f"{name!r} is not one of errands' tables")
        # The name is errands' own (checked above) with the validated prefix: never a user's
        # string; quoted as an identifier all the same.
        quoted = '"' + name.replace('"', '""') + '"'
        with self._read() as conn:
            conn.execute(self.q["vacuum_table"].replace("{table}", quoted), {})


def _holder(r: dict[str, Any], epoch: Any) -> HorizonHolder:
    return HorizonHolder(
        kind=str(r["kind"]),
        name=r["name"],
        pid=None if r["pid"] is None else int(r["pid"]),
        application_name=r["application_name"] or None,
        client_addr=r["client_addr"],
        started_at=epoch(r["started_at"]),
        query_start=epoch(r["query_start"]),
        state=r["state"],
        query=r["query"],
        xid_age=int(r["xid_age"] or 0),
    )
