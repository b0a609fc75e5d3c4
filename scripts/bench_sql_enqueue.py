"""Enqueue from SQL against ``q.enqueue``, one job per transaction, on both backends (issue
#38, docs/from-other-languages.md): ``python scripts/bench_sql_enqueue.py [N] [ROUNDS]
[postgresql://…/db]``.

Each round enqueues N jobs (``{"n": i}``, type ``t``) one by one through ``q.enqueue``, then N
through SQL on a plain driver connection of the script's own — ``SELECT errands_enqueue(…)``
(psycopg, autocommit) or ``INSERT INTO errands_enqueue`` (sqlite3, autocommit, the pragmas
errands sets for its default durability: WAL, ``synchronous=FULL``) — on the same database,
in turn, so both meet the same table size and the same host load. It prints jobs/s per way and
the ratio SQL / Python within each round; the median ratio is the figure (BENCHMARKS.md). The
PostgreSQL database is created for the run and dropped after it; the SQLite file lives in a
temporary directory.
"""

from __future__ import annotations

import json
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable

import psycopg

import errands


def timed(n: int, enqueue: Callable[[int], object]) -> float:
    t0 = time.perf_counter()
    for i in range(n):
        enqueue(i)
    return n / (time.perf_counter() - t0)


def rounds(url: str, sql: Callable[[int], object], n: int, r: int) -> list[tuple[float, float]]:
    out = []
    with errands.Queue(url) as q:
        for _ in range(r):
            python = timed(n, lambda i: q.enqueue("t", {"n": i}))
            by_sql = timed(n, sql)
            out.append((python, by_sql))
    return out


def sqlite_rounds(path: str, n: int, r: int) -> list[tuple[float, float]]:
    errands.Queue(path).close()  # the schema
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA busy_timeout = 5000")
    conn.execute("PRAGMA synchronous = FULL")
    statement = "INSERT INTO errands_enqueue (type, payload) VALUES ('t', ?)"
    try:
        return rounds(path, lambda i: conn.execute(statement, (json.dumps({"n": i}),)), n, r)
    finally:
        conn.close()


def postgres_rounds(url: str, n: int, r: int) -> list[tuple[float, float]]:
    errands.Queue(url).close()
    with psycopg.connect(url, autocommit=True) as conn:
        statement = "SELECT errands_enqueue('t', %s::jsonb)"
        return rounds(url, lambda i: conn.execute(statement, (json.dumps({"n": i}),)), n, r)


def report(name: str, figures: list[tuple[float, float]]) -> None:
    ratios = [s / p for p, s in figures]
    print(f"{name}: q.enqueue vs SQL, jobs/s per round (SQL / Python)")
    for p, s in figures:
        print(f"  {p:>8,.0f}  {s:>8,.0f}  {s / p:.2f}x")
    print(f"  median ratio {statistics.median(ratios):.2f}x")


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    r = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    admin = sys.argv[3] if len(sys.argv) > 3 else "postgresql://postgres@127.0.0.1:5432/postgres"
    with tempfile.TemporaryDirectory() as tmp:
        report("SQLite", sqlite_rounds(f"{tmp}/bench.db", n, r))
    name = f"errands_bench_{uuid.uuid4().hex[:8]}"
    base = admin.rsplit("/", 1)[0]
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    try:
        report("PostgreSQL", postgres_rounds(f"{base}/{name}", n, r))
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE {name} WITH (FORCE)")


if __name__ == "__main__":
    main()
