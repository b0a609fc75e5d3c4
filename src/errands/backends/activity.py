"""The activity noun: the operator activity log (docs/dashboard.md, "Activity").

Queries: ``activity.sql``. One row per operator action — who (``actor``), what (``action``),
on what (``target``: a queue, a key, a schedule, a summary of job ids), how many (``count``),
the filter that chose the jobs, and a short JSON ``detail``. The Queue writes it
(client/activity.py); prune keeps it for ``activity_retention``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Protocol

from ..core.records import ActivityEntry, to_datetime
from .base import Audit
from .host import Conn, SQLHost

# The newest rows scanned for the page's actor and action choices: a bounded read at any size.
CHOICES_SCAN = 5000
# The query for each combination of filters given (actor, action): each one an index serves.
BY = {
    (False, False): "",
    (True, False): "_by_actor",
    (False, True): "_by_action",
    (True, True): "_by_actor_action",
}
EPOCH = datetime.fromtimestamp(0, UTC)  # `at` is NOT NULL: never used but for the type


class ActivityReads(Protocol):
    """The operator activity log's reads (a part of ``verbs.ReadVerbs``)."""

    def list_activity(
        self, *, limit: int, before: int | None, actor: str | None, action: str | None
    ) -> list[ActivityEntry]: ...
    def activity_choices(self) -> tuple[list[str], list[str]]: ...


class ActivityVerbs(ActivityReads, Protocol):
    """The operator activity log's verbs (a part of ``verbs.Backend``)."""

    def record_activity(self, entry: ActivityEntry) -> int: ...
    def prune_activity(self, cutoff: float, limit: int, *, audit: Audit | None = None) -> int: ...


def _params(entry: ActivityEntry) -> dict[str, Any]:
    return {
        "now": entry.at.timestamp(),
        "actor": entry.actor,
        "action": entry.action,
        "target": entry.target,
        "count": entry.count,
        "filter": None if entry.filter is None else json.dumps(entry.filter),
        "detail": None if entry.detail is None else json.dumps(entry.detail),
    }


def write_audit(conn: Conn, q: Mapping[str, str], audit: Audit | None, result: Any) -> None:
    """In an operator verb's transaction, its activity row: inserted by the action's first
    transaction, brought up to date (count, detail) by each later one. Nothing if ``audit``
    is None (the verb was called by something that logs nothing: a worker, a test)."""
    entry = None if audit is None else audit.entry(result)
    if audit is None or entry is None:
        return
    params = _params(entry)
    if audit.row_id is None:
        audit.row_id = int(conn.execute(q["insert_activity"], params).fetchall()[0][0])
    else:
        conn.execute(q["update_activity"], {**params, "id": audit.row_id}).fetchall()


class SQLActivity(SQLHost):
    """Write, read and prune the operator activity log."""

    def record_activity(self, entry: ActivityEntry) -> int:
        """One row on its own: an action that changes nothing else in the database (a signal
        sent, a job enqueued by hand), or none at all. A verb that changes rows writes its row
        itself, in its own transaction (write_audit)."""
        with self._write("activity") as conn:
            return int(conn.execute(self.q["insert_activity"], _params(entry)).fetchall()[0][0])

    def list_activity(
        self, *, limit: int, before: int | None, actor: str | None, action: str | None
    ) -> list[ActivityEntry]:
        params = {"limit": limit, "before": before, "actor": actor, "action": action}
        name = "list_activity" + BY[(actor is not None, action is not None)]
        return [self._activity(r) for r in self._fetch(name, params)]

    def activity_choices(self) -> tuple[list[str], list[str]]:
        """The actors and the actions among the newest rows, each sorted."""
        rows = self._fetch("activity_actors", {"scan": CHOICES_SCAN})
        return sorted({r["actor"] for r in rows}), sorted({r["action"] for r in rows})

    def prune_activity(self, cutoff: float, limit: int, *, audit: Audit | None = None) -> int:
        """Delete up to ``limit`` rows older than ``cutoff``, oldest first; how many.
        ``audit``: an operator's prune, whose own row this transaction writes after the
        delete and which the delete spares (a ``now`` given far ahead of the clock would put
        it past the cutoff: the prune would erase its own trail)."""
        keep = 0 if audit is None or audit.row_id is None else audit.row_id  # ids start at 1
        with self._write("prune") as conn:
            params = {"cutoff": cutoff, "limit": limit, "keep": keep}
            n = len(conn.execute(self.q["prune_activity"], params).fetchall())
            write_audit(conn, self.q, audit, n)
            return n

    def _activity(self, r: dict[str, Any]) -> ActivityEntry:
        return ActivityEntry(
            id=int(r["id"]),
            at=to_datetime(self._epoch(r["at"])) or EPOCH,
            actor=r["actor"],
            action=r["action"],
            target=r["target"],
            count=int(r["count"]),
            filter=_json(r["filter"]),
            detail=_json(r["detail"]),
        )


def _json(value: Any) -> Any:
    # SQLite hands back the text; psycopg decodes jsonb already.
    return json.loads(value) if isinstance(value, str) else value
