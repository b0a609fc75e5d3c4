"""Every named query returns the same result columns — names and order — in both dialects.

The shared verbs read rows by position (``ClaimedJob(r[0]…)``, ``PeriodicRow(r[0]…)``), so a
column moved in one dialect's file would swap fields silently; test_sql_names checks only
names and parameters. Each statement is *prepared*, never run, and its result columns read
from the prepared statement: PostgreSQL's ``PQdescribePrepared`` (psycopg's ``pgconn``), and
SQLite's ``sqlite3_prepare_v2`` + ``sqlite3_column_name`` through ctypes — Python's sqlite3
module describes a statement only by executing it, which an INSERT with NULL parameters
cannot do. So writes, DDL and statements with parameters are all described the same way.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import re
import sqlite3
from pathlib import Path

import psycopg
import pytest

import errands
from errands.backends import sql

# Parameters the backends bind from Python floats, which psycopg sends typed as float8; the
# others go untyped and the server infers them from their use, as it does at run time.
FLOAT_PARAMS = {"now", "grace", "ttl"}
IDENTIFIER = re.compile(r"^[a-z_][a-z0-9_]*$")


def filled(statement: str) -> str:
    """A statement with an identifier slot (``{table}``: the verb puts one of errands' own
    table names there, as VACUUM takes no parameter) described with ``jobs`` in it."""
    return statement.replace("{table}", "jobs")


class SQLiteDescriber:
    """Result column names of prepared statements on one SQLite file (nothing is executed)."""

    def __init__(self, path: str) -> None:
        name = ctypes.util.find_library("sqlite3")
        if name is None:
            pytest.fail("libsqlite3 not found: install the SQLite library the sqlite3 module uses")
        lib = ctypes.CDLL(name)
        lib.sqlite3_open_v2.argtypes = [
            ctypes.c_char_p,
            ctypes.POINTER(ctypes.c_void_p),
            ctypes.c_int,
            ctypes.c_char_p,
        ]
        lib.sqlite3_prepare_v2.argtypes = [
            ctypes.c_void_p,
            ctypes.c_char_p,
            ctypes.c_int,
            ctypes.POINTER(ctypes.c_void_p),
            ctypes.POINTER(ctypes.c_void_p),
        ]
        lib.sqlite3_column_count.argtypes = [ctypes.c_void_p]
        lib.sqlite3_column_name.argtypes = [ctypes.c_void_p, ctypes.c_int]
        lib.sqlite3_column_name.restype = ctypes.c_char_p
        lib.sqlite3_finalize.argtypes = [ctypes.c_void_p]
        lib.sqlite3_errmsg.argtypes = [ctypes.c_void_p]
        lib.sqlite3_errmsg.restype = ctypes.c_char_p
        lib.sqlite3_close_v2.argtypes = [ctypes.c_void_p]
        self.lib = lib
        self.db = ctypes.c_void_p()
        if lib.sqlite3_open_v2(path.encode(), ctypes.byref(self.db), 1, None) != 0:  # read-only
            raise AssertionError(f"cannot open {path}")

    def columns(self, statement: str) -> list[str]:
        lib, stmt = self.lib, ctypes.c_void_p()
        text = ctypes.create_string_buffer(statement.encode())
        tail = ctypes.c_void_p()
        if lib.sqlite3_prepare_v2(self.db, text, -1, ctypes.byref(stmt), ctypes.byref(tail)):
            raise ValueError(lib.sqlite3_errmsg(self.db).decode())
        try:
            rest = ctypes.string_at(tail.value) if tail.value else b""
            assert rest.strip() == b"", "one statement per query"
            count = lib.sqlite3_column_count(stmt)
            return [lib.sqlite3_column_name(stmt, i).decode() for i in range(count)]
        finally:
            lib.sqlite3_finalize(stmt)

    def close(self) -> None:
        self.lib.sqlite3_close_v2(self.db)


def sqlite_columns(tmp_path: Path) -> dict[str, list[str]]:
    migrated, empty = str(tmp_path / "migrated.db"), str(tmp_path / "empty.db")
    errands.Queue(migrated).close()
    sqlite3.connect(empty).close()  # a file with no schema at all
    on_migrated, on_empty = SQLiteDescriber(migrated), SQLiteDescriber(empty)
    out = {}
    try:
        for name, statement in sql.queries("sqlite").items():
            try:
                out[name] = on_migrated.columns(filled(statement))
            except ValueError:
                # DDL that creates what the migrated file already has (create_schema_table)
                out[name] = on_empty.columns(filled(statement))
    finally:
        on_migrated.close()
        on_empty.close()
    return out


def pg_positional(statement: str) -> tuple[str, list[str]]:
    """psycopg's ``%(name)s`` → libpq's ``$n`` (one number per distinct name)."""
    names: dict[str, int] = {}

    def swap(match: re.Match[str]) -> str:
        if match.group(0) == "%%":
            return "%"
        return f"${names.setdefault(match.group(1), len(names) + 1)}"

    return re.sub(r"%%|%\((\w+)\)s", swap, statement), list(names)


def postgres_columns(url: str) -> dict[str, list[str]]:
    float8 = 701
    out = {}
    with psycopg.connect(url) as conn:
        pgconn = conn.pgconn
        for i, (name, statement) in enumerate(sorted(sql.queries("postgres").items())):
            text, params = pg_positional(filled(statement))
            types = [float8 if p in FLOAT_PARAMS else 0 for p in params]
            prepared = pgconn.prepare(f"q{i}".encode(), text.encode(), types)
            if prepared.status != psycopg.pq.ExecStatus.COMMAND_OK:
                raise AssertionError(f"{name}: {prepared.get_error_message()}")
            described = pgconn.describe_prepared(f"q{i}".encode())
            out[name] = [(described.fname(j) or b"").decode() for j in range(described.nfields)]
    return out


def test_every_query_returns_the_same_columns_in_both_dialects(tmp_path: Path, pg_url: str) -> None:
    lite, pg = sqlite_columns(tmp_path), postgres_columns(pg_url)
    own = sql.own_queries("postgres")
    # PostgreSQL's own claim (claim + open_attempts + insert_claimed_events in one statement)
    # stands in for claim, so the shared verbs read its rows with claim's columns.
    assert pg["claim_recorded"] == lite["claim"]  # and PostgreSQL keeps no claim (REPLACED)
    # And its limited claim's writes in one statement stand in for claim_ids and the rest.
    assert pg["claim_ids_recorded"] == pg["claim_ids"] == lite["claim_ids"]
    assert pg["insert_job_recorded"] == pg["insert_job"] == lite["insert_job"] == ["id"]
    pg = {name: cols for name, cols in pg.items() if name not in own}
    assert lite["limit_group_bytes"] == ["raw"]  # SQLite's own: mending text (sqlite_text.py)
    lite = {name: cols for name, cols in lite.items() if name not in sql.own_queries("sqlite")}
    lite = {name: cols for name, cols in lite.items() if name not in sql.REPLACED["postgres"]}
    lite_shared = set(sql.queries("sqlite")) - sql.own_queries("sqlite")
    assert set(lite) == set(pg) == lite_shared - sql.REPLACED["postgres"]
    differ = {name: (lite[name], pg[name]) for name in lite if lite[name] != pg[name]}
    assert differ == {}, "sqlite columns vs postgres columns"
    # The describers see what they should: this cannot pass on empty answers.
    assert lite["claim_ids"][:3] == ["id", "queue", "type"]
    assert lite["list_periodic"][0] == "name" and lite["insert_event"] == []


def test_every_result_column_has_a_name(tmp_path: Path) -> None:
    # An unnamed expression is called 'COUNT(*)' by SQLite and 'count' by PostgreSQL: alias
    # it, so rows can be read by name and the parity above compares names, not spellings.
    unnamed = {
        name: [c for c in columns if not IDENTIFIER.match(c)]
        for name, columns in sqlite_columns(tmp_path).items()
    }
    assert {name: cols for name, cols in unnamed.items() if cols} == {}


def test_the_parity_check_sees_a_swap(tmp_path: Path, pg_url: str) -> None:
    path = str(tmp_path / "jobs.db")
    errands.Queue(path).close()
    lite = SQLiteDescriber(path)
    try:
        lite_cols = lite.columns("SELECT id, queue FROM jobs WHERE type = :type")
    finally:
        lite.close()
    text, _ = pg_positional("SELECT queue, id FROM jobs WHERE type = %(type)s")
    with psycopg.connect(pg_url) as conn:
        conn.pgconn.prepare(b"swap", text.encode())
        described = conn.pgconn.describe_prepared(b"swap")
        pg_cols = [(described.fname(j) or b"").decode() for j in range(described.nfields)]
    assert lite_cols == ["id", "queue"] and pg_cols == ["queue", "id"]
