"""Raw baselines for ``errands bench``: the same work with the bare driver, no errands.

Each runs against a minimal jobs table (id, type, payload, status, attempts, times, worker)
in its own database (a fresh SQLite file, or a fresh PostgreSQL schema), with the same
durability settings errands uses, so each errands figure can be read as a ratio to what the
database itself does on this machine:

- ``insert``: one job row per transaction — the floor under a durable ``enqueue``.
- ``bulk_insert``: every job row in one transaction (``executemany`` on SQLite, ``COPY`` on
  PostgreSQL) — the ceiling for ``enqueue_many``.
- ``process``: claims of 50 in one ``UPDATE … RETURNING`` with an attempt row and a CLAIMED
  event per job in the same transaction, then the 50 completions in one transaction (status,
  attempt row, SUCCEEDED event) — errands' default audit, with no handler and no threads.
"""

from __future__ import annotations

import json
import sqlite3
import time
from typing import Any

BATCH = 50

SQLITE_SCHEMA = [
    """CREATE TABLE jobs (id INTEGER PRIMARY KEY AUTOINCREMENT, type TEXT NOT NULL,
       payload TEXT NOT NULL, status TEXT NOT NULL DEFAULT 'queued',
       attempts INTEGER NOT NULL DEFAULT 0, run_at REAL NOT NULL, created_at REAL NOT NULL,
       started_at REAL, finished_at REAL, worker_id TEXT)""",
    "CREATE INDEX jobs_due ON jobs (run_at, id) WHERE status = 'queued'",
    """CREATE TABLE attempts (id INTEGER PRIMARY KEY, job_id INTEGER NOT NULL,
       attempt INTEGER NOT NULL, started_at REAL NOT NULL, finished_at REAL, status TEXT)""",
    "CREATE UNIQUE INDEX attempts_job ON attempts (job_id, attempt)",
    """CREATE TABLE events (id INTEGER PRIMARY KEY, job_id INTEGER NOT NULL, ts REAL NOT NULL,
       event TEXT NOT NULL, actor TEXT)""",
    "CREATE INDEX events_job ON events (job_id, id)",
]

POSTGRES_SCHEMA = [
    """CREATE TABLE jobs (id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
       type TEXT NOT NULL, payload JSONB NOT NULL, status TEXT NOT NULL DEFAULT 'queued',
       attempts INTEGER NOT NULL DEFAULT 0, run_at TIMESTAMPTZ NOT NULL,
       created_at TIMESTAMPTZ NOT NULL, started_at TIMESTAMPTZ, finished_at TIMESTAMPTZ,
       worker_id TEXT)""",
    "CREATE INDEX jobs_due ON jobs (run_at, id) WHERE status = 'queued'",
    """CREATE TABLE attempts (id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
       job_id BIGINT NOT NULL, attempt INTEGER NOT NULL, started_at TIMESTAMPTZ NOT NULL,
       finished_at TIMESTAMPTZ, status TEXT, UNIQUE (job_id, attempt))""",
    """CREATE TABLE events (id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
       job_id BIGINT NOT NULL, ts TIMESTAMPTZ NOT NULL, event TEXT NOT NULL, actor TEXT)""",
    "CREATE INDEX events_job ON events (job_id, id)",
]


def rate(n: int, seconds: float) -> dict[str, float]:
    return {"seconds": round(seconds, 4), "per_second": round(n / seconds, 1) if seconds else 0.0}


# -- SQLite ---------------------------------------------------------------------------------


def _sqlite(path: str, durability: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {'FULL' if durability == 'full' else 'NORMAL'}")
    for statement in SQLITE_SCHEMA:
        conn.execute(statement)
    return conn


def sqlite_insert(path: str, n: int, durability: str) -> dict[str, float]:
    conn = _sqlite(path, durability)
    try:
        start = time.perf_counter()
        for i in range(n):
            now = time.time()
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(
                "INSERT INTO jobs (type, payload, run_at, created_at) VALUES ('noop', ?, ?, ?)",
                (f'{{"i":{i}}}', now, now),
            )
            conn.execute("COMMIT")
        return rate(n, time.perf_counter() - start)
    finally:
        conn.close()


def _sqlite_fill(conn: sqlite3.Connection, n: int) -> None:
    now = time.time()
    conn.execute("BEGIN IMMEDIATE")
    conn.executemany(
        "INSERT INTO jobs (type, payload, run_at, created_at) VALUES ('noop', ?, ?, ?)",
        ((f'{{"i":{i}}}', now, now) for i in range(n)),
    )
    conn.execute("COMMIT")


def sqlite_bulk_insert(path: str, n: int, durability: str) -> dict[str, float]:
    conn = _sqlite(path, durability)
    try:
        start = time.perf_counter()
        _sqlite_fill(conn, n)
        return rate(n, time.perf_counter() - start)
    finally:
        conn.close()


def sqlite_process(path: str, n: int, durability: str) -> dict[str, float]:
    conn = _sqlite(path, durability)
    try:
        _sqlite_fill(conn, n)
        done = 0
        start = time.perf_counter()
        while True:
            now = time.time()
            conn.execute("BEGIN IMMEDIATE")
            rows = conn.execute(
                "UPDATE jobs SET status = 'running', attempts = attempts + 1, worker_id = 'w', "
                "started_at = ? WHERE id IN (SELECT id FROM jobs WHERE status = 'queued' "
                "AND run_at <= ? ORDER BY run_at, id LIMIT ?) RETURNING id, attempts, payload",
                (now, now, BATCH),
            ).fetchall()
            conn.executemany(
                "INSERT INTO attempts (job_id, attempt, started_at, status) "
                "VALUES (?, ?, ?, 'running')",
                [(r[0], r[1], now) for r in rows],
            )
            conn.executemany(
                "INSERT INTO events (job_id, ts, event, actor) VALUES (?, ?, 'CLAIMED', 'w')",
                [(r[0], now) for r in rows],
            )
            conn.execute("COMMIT")
            if not rows:
                break
            for r in rows:
                json.loads(r[2])  # the least a handler call needs: its arguments
            now = time.time()
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(
                "UPDATE jobs SET status = 'succeeded', finished_at = ? "
                "WHERE id = ? AND attempts = ? AND status = 'running'",
                [(now, r[0], r[1]) for r in rows],
            )
            conn.executemany(
                "UPDATE attempts SET status = 'succeeded', finished_at = ? "
                "WHERE job_id = ? AND attempt = ?",
                [(now, r[0], r[1]) for r in rows],
            )
            conn.executemany(
                "INSERT INTO events (job_id, ts, event, actor) VALUES (?, ?, 'SUCCEEDED', 'w')",
                [(r[0], now) for r in rows],
            )
            conn.execute("COMMIT")
            done += len(rows)
        took = time.perf_counter() - start
        if done != n:
            raise RuntimeError(f"raw processing finished {done} of {n} jobs")
        return rate(n, took)
    finally:
        conn.close()


# -- PostgreSQL -----------------------------------------------------------------------------


def _pg(url: str) -> Any:
    import psycopg

    conn = psycopg.connect(url, autocommit=True)
    for statement in POSTGRES_SCHEMA:
        conn.execute(statement)
    return conn


def postgres_insert(url: str, n: int) -> dict[str, float]:
    with _pg(url) as conn:
        start = time.perf_counter()
        for i in range(n):
            conn.execute(
                "INSERT INTO jobs (type, payload, run_at, created_at) "
                "VALUES ('noop', %s, now(), now())",
                (f'{{"i":{i}}}',),
            )
        return rate(n, time.perf_counter() - start)


def _pg_fill(conn: Any, n: int) -> None:
    with conn.transaction(), conn.cursor() as cur:
        with cur.copy("COPY jobs (type, payload, run_at, created_at) FROM STDIN") as copy:
            for i in range(n):
                copy.write_row(("noop", f'{{"i":{i}}}', "now", "now"))


def postgres_bulk_insert(url: str, n: int) -> dict[str, float]:
    with _pg(url) as conn:
        start = time.perf_counter()
        _pg_fill(conn, n)
        return rate(n, time.perf_counter() - start)


def postgres_process(url: str, n: int) -> dict[str, float]:
    with _pg(url) as conn:
        _pg_fill(conn, n)
        done = 0
        start = time.perf_counter()
        while True:
            with conn.transaction():
                rows = conn.execute(
                    "UPDATE jobs SET status = 'running', attempts = attempts + 1, "
                    "worker_id = 'w', started_at = now() WHERE id IN (SELECT id FROM jobs "
                    "WHERE status = 'queued' AND run_at <= now() ORDER BY run_at, id "
                    "LIMIT %s FOR UPDATE SKIP LOCKED) RETURNING id, attempts, payload",
                    (BATCH,),
                ).fetchall()
                ids = [r[0] for r in rows]
                tries = [r[1] for r in rows]
                conn.execute(
                    "INSERT INTO attempts (job_id, attempt, started_at, status) "
                    "SELECT j, a, now(), 'running' FROM unnest(%s::bigint[], %s::int[]) AS t(j, a)",
                    (ids, tries),
                )
                conn.execute(
                    "INSERT INTO events (job_id, ts, event, actor) "
                    "SELECT j, now(), 'CLAIMED', 'w' FROM unnest(%s::bigint[]) AS t(j)",
                    (ids,),
                )
            if not rows:
                break
            with conn.transaction():
                conn.execute(
                    "UPDATE jobs SET status = 'succeeded', finished_at = now() "
                    "FROM unnest(%s::bigint[], %s::int[]) AS t(j, a) "
                    "WHERE jobs.id = t.j AND jobs.attempts = t.a AND jobs.status = 'running'",
                    (ids, tries),
                )
                conn.execute(
                    "UPDATE attempts SET status = 'succeeded', finished_at = now() "
                    "FROM unnest(%s::bigint[], %s::int[]) AS t(j, a) "
                    "WHERE attempts.job_id = t.j AND attempts.attempt = t.a",
                    (ids, tries),
                )
                conn.execute(
                    "INSERT INTO events (job_id, ts, event, actor) "
                    "SELECT j, now(), 'SUCCEEDED', 'w' FROM unnest(%s::bigint[]) AS t(j)",
                    (ids,),
                )
            done += len(rows)
        took = time.perf_counter() - start
        if done != n:
            raise RuntimeError(f"raw processing finished {done} of {n} jobs")
        return rate(n, took)
