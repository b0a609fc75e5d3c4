"""Throughput of both backends on this machine: enqueue_many N no-op jobs, then drain them
with run_worker(burst=True). ``python scripts/bench_backends.py [N] [postgresql://…/db]``.

The PostgreSQL database is created for the run and dropped after it; the SQLite file lives in
a temporary directory. Figures are recorded in docs/postgres.md.
"""

from __future__ import annotations

import sys
import tempfile
import time
import uuid

import psycopg

import errands
from errands.backends import postgres


def run(url: str, n: int) -> tuple[float, float]:
    with errands.Queue(url) as q:

        @q.task
        def noop() -> None:
            return None

        t0 = time.perf_counter()
        q.enqueue_many([("noop", {}) for _ in range(n)])
        t1 = time.perf_counter()
        summary = q.run_worker(concurrency=8, burst=True, handle_signals=False)
        t2 = time.perf_counter()
        assert summary.succeeded == n, summary
    return n / (t1 - t0), n / (t2 - t1)


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
    admin = sys.argv[2] if len(sys.argv) > 2 else "postgresql://postgres@127.0.0.1:5432/postgres"
    with tempfile.TemporaryDirectory() as tmp:
        lite = run(f"{tmp}/bench.db", n)
    name = f"errands_bench_{uuid.uuid4().hex[:8]}"
    base = admin.rsplit("/", 1)[0]
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    try:
        pg = run(f"{base}/{name}", n)
        postgres.COPY_THRESHOLD = 10**9  # the same enqueue through pipelined INSERTs
        pg_insert = run(f"{base}/{name}", n)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE {name} WITH (FORCE)")
    print(f"{n} no-op jobs, jobs/s        enqueue_many   process (burst, concurrency 8)")
    print(f"SQLite (synchronous=FULL)   {lite[0]:>12,.0f}   {lite[1]:>10,.0f}")
    print(f"PostgreSQL (COPY)           {pg[0]:>12,.0f}   {pg[1]:>10,.0f}")
    print(f"PostgreSQL (per-row INSERT) {pg_insert[0]:>12,.0f}")


if __name__ == "__main__":
    main()
