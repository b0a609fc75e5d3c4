#!/usr/bin/env python3
"""The cost of durable steps (docs/durable-steps.md), in paired rounds on fresh databases:

    .venv/bin/python scripts/bench_steps.py [--db postgresql://…] [--jobs N] [--rounds R]
        [--sleepers S] [--concurrency C]

Each round drains ``--jobs`` jobs with ``run_worker(burst=True)`` three ways, one right
after the other: a no-op job (the baseline), the same job recording three no-op steps
(``ctx.step``), and the no-op job beside ``--sleepers`` jobs parked in ``ctx.sleep`` (a day)
and ``ctx.wait_for`` (half each), parked before the clock starts (then, on PostgreSQL, a
``VACUUM ANALYZE`` stands in for autovacuum). Prints jobs/s of each, the
cost of one recorded step in µs, and the medians over rounds of the ratios to the baseline.
A PostgreSQL ``--db`` names a server: each run creates and drops a database of its own.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import errands


@contextmanager
def fresh(db: str | None) -> Iterator[str]:
    if db is None:
        with tempfile.TemporaryDirectory() as d:
            yield os.path.join(d, "bench.db")
        return
    import psycopg

    name = f"bench_steps_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(db, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    try:
        yield db.rsplit("/", 1)[0] + "/" + name
    finally:
        with psycopg.connect(db, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE {name} WITH (FORCE)")


def settle(url: str) -> None:
    """PostgreSQL: what autovacuum would have done after parking the jobs (statistics, dead
    rows); the test server runs with autovacuum off. SQLite keeps no statistics to go stale."""
    if url.startswith("postgresql"):
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE")


def noop() -> None:
    return None


def run(url: str, jobs: int, steps: int, sleepers: int, concurrency: int) -> float:
    with errands.Queue(url) as q:

        @q.task()
        def work(ctx: errands.JobContext, n: int) -> None:
            for i in range(steps):
                ctx.step(f"s{i}", noop)

        @q.task()
        def parked(ctx: errands.JobContext, n: int) -> None:
            if n % 2:
                ctx.sleep(86400)
            else:
                ctx.wait_for("never")

        if sleepers:
            q.enqueue_many([("parked", {"n": n}) for n in range(sleepers)])
            q.run_worker(burst=True, concurrency=concurrency, handle_signals=False)
            settle(url)
        q.enqueue_many([("work", {"n": n}) for n in range(jobs)])
        start = time.perf_counter()
        q.run_worker(burst=True, concurrency=concurrency, handle_signals=False)
        took = time.perf_counter() - start
        done = q.stats()["counts"]["succeeded"]
        assert done == jobs, f"{done} of {jobs} jobs succeeded"
        return jobs / took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", help="a PostgreSQL server URL (default: SQLite files)")
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sleepers", type=int, default=10000)
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args()
    ways: dict[str, Callable[[str], float]] = {
        "plain": lambda url: run(url, args.jobs, 0, 0, args.concurrency),
        "three_steps": lambda url: run(url, args.jobs, 3, 0, args.concurrency),
        "beside_parked": lambda url: run(url, args.jobs, 0, args.sleepers, args.concurrency),
    }
    rounds: list[dict[str, float]] = []
    for _ in range(args.rounds):
        row = {}
        for name, way in ways.items():
            with fresh(args.db) as url:
                row[name] = way(url)
        rounds.append(row)
        print(json.dumps({k: round(v) for k, v in row.items()}), flush=True)
    out: dict[str, Any] = {
        "db": "postgresql" if args.db else "sqlite",
        "jobs": args.jobs,
        "sleepers": args.sleepers,
        "rounds": rounds,
        "step_us": statistics.median(
            (1 / r["three_steps"] - 1 / r["plain"]) / 3 * 1e6 for r in rounds
        ),
        "three_steps_ratio": statistics.median(r["three_steps"] / r["plain"] for r in rounds),
        "beside_parked_ratio": statistics.median(r["beside_parked"] / r["plain"] for r in rounds),
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
