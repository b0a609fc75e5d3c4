"""Raw baselines for ``errands bench``: the same work with the bare driver, no errands.

Each runs against a minimal jobs table (id, type, payload, status, attempts, times, worker)
in its own database (a fresh SQLite file, or a fresh PostgreSQL schema), with the same
durability settings errands uses, so each errands figure can be read as a ratio to what the
database itself does on this machine:

- ``insert``: one job row per transaction — the floor under a durable ``enqueue``.
- ``insert_audited``: the same with the job's ENQUEUED audit row in its transaction (on
  PostgreSQL in the same statement, as errands sends it) — what ``enqueue`` writes with the
  default audit, so ``enqueue`` over it is what errands costs above the rows it promises.
- ``bulk_insert``: every job row in one transaction (``executemany`` on SQLite, ``COPY`` on
  PostgreSQL) — the ceiling for ``enqueue_many``.
- ``process``: claims of 50 in one ``UPDATE … RETURNING`` with an attempt row and a CLAIMED
  event per job in the same transaction, then the 50 completions in one transaction (status,
  attempt row, SUCCEEDED event) — errands' default audit, with no handler and no threads.
- ``process_p``: the same claims and completions by P processes at once on one table (each
  started and connected before the clock starts, as errands' workers are) — the baseline of
  processing by P ``errands worker`` processes, so that row compares like with like.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
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
    conn = _sqlite_open(path, durability)
    for statement in SQLITE_SCHEMA:
        conn.execute(statement)
    return conn


def _sqlite_open(path: str, durability: str) -> sqlite3.Connection:
    # A busy timeout as errands' own: P processes take turns at the write lock.
    conn = sqlite3.connect(path, isolation_level=None, timeout=30)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {'FULL' if durability == 'full' else 'NORMAL'}")
    return conn


def sqlite_insert(path: str, n: int, durability: str, *, audited: bool = False) -> dict[str, float]:
    """One job per transaction; ``audited``: with its ENQUEUED event row too."""
    conn = _sqlite(path, durability)
    try:
        start = time.perf_counter()
        for i in range(n):
            now = time.time()
            conn.execute("BEGIN IMMEDIATE")
            job = conn.execute(
                "INSERT INTO jobs (type, payload, run_at, created_at) VALUES ('noop', ?, ?, ?)",
                (f'{{"i":{i}}}', now, now),
            )
            if audited:
                conn.execute(
                    "INSERT INTO events (job_id, ts, event, actor) VALUES (?, ?, 'ENQUEUED', 'p')",
                    (job.lastrowid, now),
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
        start = time.perf_counter()
        done = _sqlite_drain(conn)
        took = time.perf_counter() - start
        if done != n:
            raise RuntimeError(f"raw processing finished {done} of {n} jobs")
        return rate(n, took)
    finally:
        conn.close()


def sqlite_process_parallel(path: str, n: int, durability: str, processes: int) -> dict[str, float]:
    conn = _sqlite(path, durability)
    try:
        _sqlite_fill(conn, n)
    finally:
        conn.close()
    return _parallel(["sqlite", path, durability], n, processes)


def _sqlite_drain(conn: sqlite3.Connection) -> int:
    """Claim and complete batches until none is left; returns how many jobs this did."""
    done = 0
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
            return done
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


# -- P processes ------------------------------------------------------------------------------


def _parallel(args: list[str], n: int, processes: int) -> dict[str, float]:
    """P child processes drain the filled table together. Each imports, connects and says
    "ready" before the clock starts, then all are told "go" at once; the time is until the
    last one has found nothing left."""
    cmd = [sys.executable, "-m", __name__, *args]  # by __name__: wherever this module lives
    children = [
        subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for _ in range(processes)
    ]
    try:
        for child in children:
            assert child.stdout is not None and child.stdin is not None
            if child.stdout.readline().strip() != "ready":
                raise RuntimeError("a raw processing child failed to start")
        start = time.perf_counter()
        for child in children:
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        done = 0
        for child in children:
            assert child.stdout is not None
            out = child.stdout.read()
            if child.wait() != 0:
                raise RuntimeError("a raw processing child failed")
            done += int(out)
        took = time.perf_counter() - start
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    if done != n:
        raise RuntimeError(f"raw processing by {processes} processes finished {done} of {n} jobs")
    return rate(n, took)


def _child(argv: list[str]) -> None:
    """One of ``_parallel``'s processes: connect, say ready, wait for go, drain, print count."""
    if argv[0] == "sqlite":
        conn: Any = _sqlite_open(argv[1], argv[2])
        drain: Any = _sqlite_drain
    else:
        import psycopg

        conn = psycopg.connect(argv[1], autocommit=True)
        drain = _pg_drain
    try:
        print("ready", flush=True)
        if sys.stdin.readline().strip() != "go":
            return
        print(drain(conn), flush=True)
    finally:
        conn.close()


# -- PostgreSQL -----------------------------------------------------------------------------


def _pg(url: str) -> Any:
    import psycopg

    conn = psycopg.connect(url, autocommit=True)
    for statement in POSTGRES_SCHEMA:
        conn.execute(statement)
    return conn


_PG_INSERT = (
    "INSERT INTO jobs (type, payload, run_at, created_at) VALUES ('noop', %s, now(), now())"
)
# The job and its ENQUEUED event in one statement, as errands' insert_job_recorded sends them.
_PG_INSERT_AUDITED = (
    f"WITH job AS ({_PG_INSERT} RETURNING id) INSERT INTO events (job_id, ts, event, actor) "
    "SELECT id, now(), 'ENQUEUED', 'p' FROM job"
)


def postgres_insert(url: str, n: int, *, audited: bool = False) -> dict[str, float]:
    """One job per transaction; ``audited``: with its ENQUEUED event row too."""
    statement = _PG_INSERT_AUDITED if audited else _PG_INSERT
    with _pg(url) as conn:
        start = time.perf_counter()
        for i in range(n):
            conn.execute(statement, (f'{{"i":{i}}}',))
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
        start = time.perf_counter()
        done = _pg_drain(conn)
        took = time.perf_counter() - start
        if done != n:
            raise RuntimeError(f"raw processing finished {done} of {n} jobs")
        return rate(n, took)


def postgres_process_parallel(url: str, n: int, processes: int) -> dict[str, float]:
    with _pg(url) as conn:
        _pg_fill(conn, n)
    return _parallel(["postgres", url], n, processes)


def _pg_drain(conn: Any) -> int:
    """Claim (``SKIP LOCKED``) and complete batches until none is left; returns the count."""
    done = 0
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
            return done
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


if __name__ == "__main__":
    _child(sys.argv[1:])
