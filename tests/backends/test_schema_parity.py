"""After migrating, SQLite and PostgreSQL hold the same logical schema: tables, columns (types
mapped by family), NOT NULL, primary keys, indexes (columns, order, uniqueness, partial or
not), CHECK constraints per table, and foreign keys with ON DELETE CASCADE."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from typing import Any

import psycopg

import errands
from helpers.support import first_row

# SQLite's declared type → the PostgreSQL types that may stand for it.
FAMILY = {
    "INTEGER": {"bigint", "integer", "smallint"},
    "REAL": {"double precision", "timestamp with time zone"},
    "TEXT": {"text", "jsonb"},
}
TIMESTAMPS = re.compile(r"^(ts|hour|minute|.*_at)$")
JSON_COLUMNS = {"payload", "result", "detail", "wait_hist", "run_hist", "headers", "options"}


def sqlite_schema(path: str) -> dict[str, Any]:
    conn = sqlite3.connect(path)
    try:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' "
                "AND name NOT LIKE 'sqlite_%' ORDER BY name"
            )
        ]
        out: dict[str, Any] = {}
        for t in tables:
            info = conn.execute(f"PRAGMA table_info({t})").fetchall()
            pk = tuple(r[1] for r in sorted((r for r in info if r[5]), key=lambda r: r[5]))
            columns = {r[1]: (r[2].upper(), bool(r[3]) or r[1] in pk) for r in info}
            indexes = set()
            for _, name, unique, origin, partial in conn.execute(f"PRAGMA index_list({t})"):
                if origin == "pk":
                    continue
                cols = tuple(
                    (r[2], bool(r[3]))
                    for r in conn.execute(f"PRAGMA index_xinfo({name})")
                    if r[5]  # key columns only
                )
                indexes.add((cols, bool(unique), bool(partial)))
            fks = {(r[2], r[3], r[4], r[6]) for r in conn.execute(f"PRAGMA foreign_key_list({t})")}
            (ddl,) = conn.execute(
                "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (t,)
            ).fetchone()
            checks = len(re.findall(r"\bCHECK\s*\(", ddl, re.IGNORECASE))
            out[t] = {
                "columns": columns,
                "pk": pk,
                "indexes": indexes,
                "fks": fks,
                "checks": checks,
            }
        return out
    finally:
        conn.close()


def postgres_schema(url: str) -> dict[str, Any]:
    with psycopg.connect(url) as conn:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() ORDER BY 1"
            )
        ]
        out: dict[str, Any] = {}
        for t in tables:
            columns = {
                name: (dtype, nullable == "NO")
                for name, dtype, nullable in conn.execute(
                    "SELECT column_name, data_type, is_nullable FROM information_schema.columns "
                    "WHERE table_schema = current_schema() AND table_name = %s",
                    (t,),
                )
            }
            pk_row = conn.execute(
                "SELECT array(SELECT a.attname FROM unnest(c.conkey) WITH ORDINALITY k(n, i) "
                "JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.n ORDER BY k.i) "
                "FROM pg_constraint c WHERE c.conrelid = %s::regclass AND c.contype = 'p'",
                (t,),
            ).fetchone()
            pk = tuple(pk_row[0]) if pk_row else ()
            indexes = set()
            # indnatts counts INCLUDE columns too: SQLite has no INCLUDE, so its covering
            # index lists them as trailing key columns (jobs_finished_type, migration 0011).
            for indexrelid, nkeys, unique, primary, partial, options in conn.execute(
                "SELECT x.indexrelid, x.indnatts, x.indisunique, x.indisprimary, "
                "x.indpred IS NOT NULL, x.indoption::int2[] FROM pg_index x "
                "WHERE x.indrelid = %s::regclass",
                (t,),
            ).fetchall():
                if primary:
                    continue
                cols = tuple(
                    (
                        first_row(
                            conn.execute(
                                "SELECT pg_get_indexdef(%s, %s, true)", (indexrelid, k + 1)
                            ).fetchone()
                        )[0],
                        k < len(options) and bool(options[k] & 1),  # INDOPTION_DESC
                    )
                    for k in range(nkeys)
                )
                indexes.add((cols, unique, partial))
            fks = {
                (ref, src, dst, {"c": "CASCADE", "a": "NO ACTION"}.get(action, action))
                for ref, src, dst, action in conn.execute(
                    "SELECT c.confrelid::regclass::text, a.attname, b.attname, c.confdeltype "
                    "FROM pg_constraint c "
                    "JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = c.conkey[1] "
                    "JOIN pg_attribute b ON b.attrelid = c.confrelid AND b.attnum = c.confkey[1] "
                    "WHERE c.conrelid = %s::regclass AND c.contype = 'f'",
                    (t,),
                )
            }
            (checks,) = first_row(
                conn.execute(
                    "SELECT count(*) FROM pg_constraint WHERE conrelid = %s::regclass "
                    "AND contype = 'c'",
                    (t,),
                ).fetchone()
            )
            out[t] = {
                "columns": columns,
                "pk": pk,
                "indexes": indexes,
                "fks": fks,
                "checks": checks,
            }
        return out


def test_logical_schemas_are_equal(tmp_path: Path, pg_empty_url: str) -> None:
    path = str(tmp_path / "parity.db")
    with errands.Queue(path), errands.Queue(pg_empty_url):
        pass  # each migrates its database
    lite, pg = sqlite_schema(path), postgres_schema(pg_empty_url)

    assert sorted(lite) == sorted(pg)
    for table in lite:
        a, b = lite[table], pg[table]
        assert sorted(a["columns"]) == sorted(b["columns"]), table
        for col, (ltype, lnotnull) in a["columns"].items():
            ptype, pnotnull = b["columns"][col]
            assert ptype in FAMILY[ltype], f"{table}.{col}: {ltype} vs {ptype}"
            if ltype == "REAL" and TIMESTAMPS.match(col):
                assert ptype == "timestamp with time zone", f"{table}.{col} is a timestamp"
            if col in JSON_COLUMNS:
                assert ptype == "jsonb", f"{table}.{col} holds JSON"
            assert lnotnull == pnotnull, f"{table}.{col}: NOT NULL differs"
        assert a["pk"] == b["pk"], table
        assert a["indexes"] == b["indexes"], table
        assert a["fks"] == b["fks"], table
        assert a["checks"] == b["checks"], table
    # The shape the spec promises, so an equal-but-wrong schema still fails here.
    assert ("jobs", "job_id", "id", "CASCADE") in lite["job_events"]["fks"]
    assert ((("priority", True), ("run_at", False), ("id", False)), False, True) in lite["jobs"][
        "indexes"
    ]
