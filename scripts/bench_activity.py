#!/usr/bin/env python3
"""The activity page and API over a large operator activity log: server time per view.

    .venv/bin/python scripts/bench_activity.py [--rows 100000]
    .venv/bin/python scripts/bench_activity.py --postgres postgresql://postgres@127.0.0.1/postgres

Writes ``--rows`` rows into ``operator_actions`` with plain SQL (12 actors, 16 actions, one
rare actor and action among them), into a fresh SQLite file, or with ``--postgres SERVER_URL``
a fresh database ``errands_activity_bench`` on that server (dropped and made again on each
run). Each view is asked for through Starlette's TestClient (in-process: the server's time, no
network) by a fresh app (the first view), then five times more; the first time and the median
of the five are printed, in milliseconds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import errands

ACTORS = [f"user{i}" for i in range(11)] + ["cli:rare"]
ACTIONS = [
    "retry", "cancel", "delete", "run_now", "priority", "pause", "resume", "set_limit",
    "clear_limit", "periodic_disable", "periodic_enable", "periodic_run", "periodic_remove",
    "enqueue", "signal", "prune",
]  # fmt: skip
VIEWS = [
    "/activity",
    "/activity?actor=user3",
    "/activity?action=priority",
    "/activity?actor=cli:rare",
    "/activity?actor=user3&action=retry",
    "/api/admin/activity",
    "/api/admin/activity?action=signal&limit=500",
]


def fill(q: errands.Queue, rows: int) -> None:
    now = time.time()
    batch = []
    backend: object = q.backend
    write = backend._write  # type: ignore[attr-defined]
    insert = backend.q["insert_activity"]  # type: ignore[attr-defined]
    for i in range(rows):
        rare = i % 9973 == 0
        batch.append(
            {
                "now": now - (rows - i) * 30.0,
                "actor": "cli:rare" if rare else ACTORS[i % 11],
                "action": "signal" if rare else ACTIONS[i % 15],
                "target": f"jobs {i}, {i + 1}, {i + 2} … (120 in all)",
                "count": 120,
                "filter": json.dumps({"status": "failed", "queue": "default"}),
                "detail": json.dumps({"asked": 120, "changed": list(range(i, i + 50))}),
            }
        )
        if len(batch) == 5000:
            with write("bench") as conn:
                conn.executemany(insert, batch)
            batch = []
    if batch:
        with write("bench") as conn:
            conn.executemany(insert, batch)


def measure(url: str) -> None:
    from starlette.testclient import TestClient

    from errands.web import create_app

    for view in VIEWS:
        with errands.Queue(url) as q, TestClient(create_app(q)) as c:
            start = time.perf_counter()
            r = c.get(view)
            first = (time.perf_counter() - start) * 1000
            assert r.status_code == 200, (view, r.status_code)
            times = []
            for _ in range(5):
                start = time.perf_counter()
                c.get(view)
                times.append((time.perf_counter() - start) * 1000)
        print(f"  {view:48} first {first:7.1f} ms   median {statistics.median(times):7.1f} ms")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=100_000, help="activity rows to write")
    ap.add_argument("--postgres", help="a PostgreSQL server URL (a fresh database is made)")
    args = ap.parse_args()
    if args.postgres:
        import psycopg

        with psycopg.connect(args.postgres, autocommit=True) as conn:
            conn.execute("DROP DATABASE IF EXISTS errands_activity_bench")
            conn.execute("CREATE DATABASE errands_activity_bench")
        url = args.postgres.rsplit("/", 1)[0] + "/errands_activity_bench"
    else:
        url = os.path.join(tempfile.mkdtemp(), "activity.db")
    with errands.Queue(url) as q:
        start = time.perf_counter()
        fill(q, args.rows)
        built = time.perf_counter() - start
    backend = "PostgreSQL" if args.postgres else "SQLite"
    print(f"{backend}: {args.rows:,} activity rows written in {built:.1f} s")
    measure(url)
    return 0


if __name__ == "__main__":
    sys.exit(main())
