"""Enqueueing as another language would, through a driver connection of its own (never
errands'): the SQL contract of docs/from-other-languages.md, shared by its tests."""

from __future__ import annotations

import sqlite3
from datetime import datetime
from typing import Any

from helpers.support import is_sqlite

OPTIONS = ("queue", "priority", "run_at", "max_attempts", "unique_key", "actor")


def sql_enqueue(
    url: str, job_type: Any, payload: Any, *, name: str = "errands_enqueue", **options: Any
) -> int:
    """One job enqueued by SQL alone, as a non-Python client would: ``SELECT
    errands_enqueue(…)`` with named arguments on PostgreSQL, ``INSERT INTO errands_enqueue``
    on SQLite (its id read back in the same transaction). ``payload``: JSON text. ``run_at``:
    a datetime (unix seconds on SQLite). ``name``: the view's or function's (a prefix's)."""
    assert set(options) <= set(OPTIONS), options
    if is_sqlite(url):
        if isinstance(options.get("run_at"), datetime):
            options["run_at"] = options["run_at"].timestamp()
        names = ["type", "payload", *options]
        conn = sqlite3.connect(url, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(
                f"INSERT INTO {name} ({', '.join(names)}) "
                f"VALUES ({', '.join(':' + n for n in names)})",
                {"type": job_type, "payload": payload, **options},
            )
            jobs = name.removesuffix("errands_enqueue") + "jobs"
            (job_id,) = conn.execute(f"SELECT max(id) FROM {jobs}").fetchone()
            conn.execute("COMMIT")
            return int(job_id)
        finally:
            conn.close()
    import psycopg

    args = ", ".join(f"{n} => %({n})s" for n in options)
    with psycopg.connect(url, autocommit=True) as pg:
        row = pg.execute(
            f"SELECT {name}(%(type)s, CAST(%(payload)s AS jsonb){', ' if args else ''}{args})",
            {"type": job_type, "payload": payload, **options},
        ).fetchone()
    assert row is not None
    return int(row[0])


def app_transaction(url: str, statements: list[str], *, commit: bool) -> None:
    """The application's own transaction, on a connection of its own."""
    if is_sqlite(url):
        conn = sqlite3.connect(url, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            for statement in statements:
                conn.execute(statement)
            conn.execute("COMMIT" if commit else "ROLLBACK")
        finally:
            conn.close()
        return
    import psycopg

    with psycopg.connect(url) as pg:
        for statement in statements:
            pg.execute(statement)
        if commit:
            pg.commit()
        else:
            pg.rollback()
