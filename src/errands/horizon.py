"""Dead tuples and the xmin horizon, shaped for ``stats``, ``check``, the metrics and the
dashboard (PostgreSQL; on SQLite, which keeps neither, ``applicable`` is False and ``check``
says nothing).

Every claim and outcome leaves dead row versions behind; VACUUM reclaims them only once no
open snapshot can still see them. Anything holding this database's xmin horizon (a long
transaction, a standby's ``hot_standby_feedback``, a replication slot, a prepared
transaction, ``pg_dump``) keeps them, and a claim then walks ever more dead index entries. So
``check`` names the holder — pid, application, client, age, query start — and what to do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .backends.base import HorizonHolder, TableHealth
from .backends.verbs import ReadVerbs
from .core.records import to_datetime

# check's defaults (its --max-dead-tuples, --max-horizon-age, --max-horizon-xids).
# 100,000 dead tuples in one table is about four minutes of a steady 400 jobs/s with nothing
# reclaiming them: enough to have doubled the pickup lag on the 2-core measurement.
DEAD_TUPLES_MAX = 100_000
# A report or pg_dump of a few minutes is ordinary; past five minutes at a busy queue's rate
# the dead tuples it keeps cost every claim.
HORIZON_AGE_MAX = 300.0
# A slot keeps no start time, only the transaction it holds: a million transactions is
# minutes of a busy queue (each job takes a few).
HORIZON_XIDS_MAX = 1_000_000


@dataclass(frozen=True, slots=True)
class Limits:
    """Past these, ``check`` fails (each a ``check`` option)."""

    dead_tuples: int = DEAD_TUPLES_MAX
    horizon_age: float = HORIZON_AGE_MAX
    horizon_xids: int = HORIZON_XIDS_MAX


def collect(backend: ReadVerbs, now: float) -> dict[str, Any]:
    """The JSON-ready figures: per table dead and live tuples, last vacuums, autovacuum's
    switch and size; what holds the horizon, oldest first; errands' own vacuum's leader."""
    tables = backend.table_health()
    if not tables:
        return {"applicable": False, "warning": None}
    holders = backend.horizon_holders()
    ages = [a for a in (h.age(now) for h in holders) if a is not None]
    held = [_holder(h, now) for h in holders]
    past = [h for h in held if _past(h, Limits())]
    return {
        "applicable": True,
        "dead_tuples": sum(t.dead_tuples for t in tables),
        "tables": [_table(t) for t in tables],
        "autovacuum_off": sorted((t.name for t in tables if not t.autovacuum_on), key=_hot_first),
        "errands_vacuum": backend.vacuum_leader(now),
        "horizon": {
            "age_seconds": round(max(ages), 3) if ages else None,
            "xid_age": max((h.xid_age for h in holders), default=0),
            "held_by": held,
        },
        # The dashboard's one line: the oldest holder past check's default limits.
        "warning": (
            f"{holder_line(past[0])}: VACUUM cannot reclaim errands' dead tuples meanwhile"
            if past
            else None
        ),
    }


def _past(h: dict[str, Any], limits: Limits) -> bool:
    age = h["age_seconds"]
    return (age is not None and age > limits.horizon_age) or int(h["xid_age"]) > limits.horizon_xids


# The tables every job rewrites, named first in a message (the rest churn far less).
HOT_TABLES = ("jobs", "job_attempts", "job_events")


def _hot_first(name: str) -> tuple[int, str]:
    # Names carry the installation's prefix (errands_jobs): matched by their end.
    rank = next((i for i, hot in enumerate(HOT_TABLES) if name.endswith(hot)), len(HOT_TABLES))
    return rank, name


def _table(t: TableHealth) -> dict[str, Any]:
    return {
        "table": t.name,
        "live_tuples": t.live_tuples,
        "dead_tuples": t.dead_tuples,
        "last_vacuum_at": _iso(t.last_vacuum_at),
        "last_autovacuum_at": _iso(t.last_autovacuum_at),
        "autovacuum_on": t.autovacuum_on,
        "bytes": t.bytes,
    }


def _holder(h: HorizonHolder, now: float) -> dict[str, Any]:
    age = h.age(now)
    return {
        "kind": h.kind,
        "name": h.name,
        "pid": h.pid,
        "application_name": h.application_name,
        "client_addr": h.client_addr,
        "age_seconds": None if age is None else round(age, 3),
        "started_at": _iso(h.started_at),
        "query_start": _iso(h.query_start),
        "state": h.state,
        "query": h.query,
        "xid_age": h.xid_age,
    }


def _iso(seconds: float | None) -> str | None:
    dt = to_datetime(seconds)
    return None if dt is None else dt.isoformat(timespec="seconds")


def _span(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def who(h: dict[str, Any]) -> str:
    """A holder named as an operator finds it: its kind, name or pid, application, client."""
    parts = [h["kind"]]
    if h["name"] is not None:
        parts.append(repr(h["name"]))
    if h["pid"] is not None:
        parts.append(f"pid {h['pid']}")
    seen = [
        f"application {h['application_name']!r}" if h["application_name"] else None,
        f"client {h['client_addr']}" if h["client_addr"] else None,
    ]
    named = ", ".join(s for s in seen if s)
    return " ".join(parts) + (f" ({named})" if named else "")


def _remedy(h: dict[str, Any]) -> str:
    if h["kind"] == "replication slot":
        return f"if its consumer is gone, drop it: SELECT pg_drop_replication_slot('{h['name']}')"
    if h["kind"] == "prepared transaction":
        return f"finish it: COMMIT PREPARED or ROLLBACK PREPARED '{h['name']}'"
    if h["kind"] == "standby feedback":
        return "a long query on that standby (hot_standby_feedback): end it there"
    return f"end it, or SELECT pg_terminate_backend({h['pid']})"


def holder_line(h: dict[str, Any]) -> str:
    """One holder in one line: who, for how long, since when, and the way out."""
    held = (
        f"for {_span(h['age_seconds'])} (since {h['started_at']})"
        if h["age_seconds"] is not None
        else f"{h['xid_age']:,} transactions back"
    )
    query = f", query started {h['query_start']}" if h["query_start"] else ""
    state = f", {h['state']}" if h["state"] else ""
    return f"{who(h)} has held the xmin horizon {held}{query}{state}"


def problems(figures: dict[str, Any], limits: Limits) -> list[str]:
    """``check``'s lines: autovacuum off with nothing of errands' reclaiming dead tuples,
    tables past ``limits.dead_tuples``, and each holder past the age or transaction limit."""
    if not figures["applicable"]:
        return []
    out = []
    off = figures["autovacuum_off"]
    if off and figures["errands_vacuum"] is None:
        out.append(
            f"autovacuum is off for {len(off)} of errands' table(s) ({_names(off)}) and no "
            "worker runs errands' own vacuum: dead tuples pile up and every claim slows; turn "
            "autovacuum on (ALTER SYSTEM SET autovacuum = on; SELECT pg_reload_conf()), or "
            "start a worker (its vacuum service reclaims them) — docs/postgres.md"
        )
    piled = [t for t in figures["tables"] if t["dead_tuples"] > limits.dead_tuples]
    if piled:
        which = ", ".join(f"{t['table']} {t['dead_tuples']:,}" for t in piled)
        out.append(
            f"dead tuples past --max-dead-tuples {limits.dead_tuples:,}: {which}; VACUUM has "
            "not reclaimed them (autovacuum off or lagging, or something holds the xmin "
            "horizon: see `errands stats`)"
        )
    for h in figures["horizon"]["held_by"]:
        if _past(h, limits):
            out.append(
                f"{holder_line(h)} (over --max-horizon-age {_span(limits.horizon_age)} or "
                f"--max-horizon-xids {limits.horizon_xids:,}): VACUUM cannot reclaim errands' "
                f"dead tuples meanwhile; {_remedy(h)}"
            )
    return out


def warnings(figures: dict[str, Any]) -> list[str]:
    """What ``check`` reports without failing: autovacuum off where errands' vacuum runs."""
    if not figures["applicable"] or not figures["autovacuum_off"]:
        return []
    if figures["errands_vacuum"] is None:
        return []  # a problem, not a warning
    off = figures["autovacuum_off"]
    return [
        f"autovacuum is off for {len(off)} of errands' table(s) ({_names(off)}); errands' own "
        f"vacuum (worker {figures['errands_vacuum']}) reclaims their dead tuples"
    ]


def _names(tables: list[str]) -> str:
    return ", ".join(tables[:3]) + (f", … {len(tables) - 3} more" if len(tables) > 3 else "")


def stats_lines(figures: dict[str, Any]) -> list[str]:
    """``errands stats``' lines (none on SQLite)."""
    if not figures["applicable"]:
        return []
    top = [t for t in figures["tables"] if t["dead_tuples"]][:3]
    dead = ", ".join(f"{t['table']} {t['dead_tuples']:,}" for t in top) or "none"
    lines = [f"vacuum    dead tuples {figures['dead_tuples']:,} ({dead})"]
    off = figures["autovacuum_off"]
    if off:
        by = figures["errands_vacuum"]
        lines.append(
            f"          autovacuum off for {len(off)} table(s); "
            + (f"errands' vacuum runs on {by}" if by else "nothing reclaims their dead tuples")
        )
    horizon = figures["horizon"]
    if not horizon["held_by"]:
        lines.append("horizon   nothing holds it")
    else:
        lines.append(
            f"horizon   {_span(horizon['age_seconds'])} old, {horizon['xid_age']:,} "
            "transactions back"
        )
        for h in horizon["held_by"][:3]:
            lines.append(f"          {holder_line(h)}")
    return lines
