"""Measure `errands stats` (and a prune) on a generated database of a million finished jobs.

    python scripts/bench_ops.py /tmp/ops-1m.db [--rows 1000000]

Rows are spread over 30 days (95% succeeded, 4% failed, 1% cancelled; 20 types on 3 queues),
plus a small active set, written straight into the public schema for speed. Prints the time
of each stats call and of pruning the oldest day in batches.
"""

from __future__ import annotations

import argparse
import os
import random
import sqlite3
import time

import errands

TYPES = [f"task_{i}" for i in range(20)]
QUEUES = ["default", "mail", "reports"]
CODES = ["SMTP:REJECTED", "HTTP:502", "INTERNAL:KeyError", "TIMEOUT:JOB"]


def generate(path: str, rows: int, now: float) -> None:
    with errands.Queue(path):
        pass  # create and migrate
    conn = sqlite3.connect(path)
    rnd = random.Random(42)
    batch = []
    sql = (
        "INSERT INTO jobs (queue, type, payload, status, attempts, max_attempts, run_at,"
        " created_at, started_at, finished_at, worker_id, error_code, error_detail)"
        " VALUES (?, ?, '{}', ?, ?, 20, ?, ?, ?, ?, 'w1', ?, ?)"
    )
    conn.execute("BEGIN")
    for _ in range(rows):
        finished = now - rnd.random() * 30 * 86400
        started = finished - rnd.expovariate(2.0)
        run_at = started - rnd.expovariate(5.0)
        r = rnd.random()
        status = "succeeded" if r < 0.95 else "failed" if r < 0.99 else "cancelled"
        code = rnd.choice(CODES) if status == "failed" else None
        if status == "cancelled":
            code = "CANCELLED:BY_USER"
        attempts = 1 if status != "failed" and rnd.random() < 0.9 else rnd.randint(2, 5)
        batch.append(
            (
                rnd.choice(QUEUES),
                rnd.choice(TYPES),
                status,
                attempts,
                run_at,
                run_at,
                started,
                finished,
                code,
                "boom" if code else None,
            )
        )
        if len(batch) == 50_000:
            conn.executemany(sql, batch)
            batch.clear()
    conn.executemany(sql, batch)
    for i in range(500):  # a small active set
        conn.execute(
            "INSERT INTO jobs (queue, type, status, run_at, created_at)"
            " VALUES (?, ?, 'queued', ?, ?)",
            (rnd.choice(QUEUES), rnd.choice(TYPES), now - i, now - i),
        )
    conn.execute("COMMIT")
    conn.execute("ANALYZE")
    conn.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("path")
    ap.add_argument("--rows", type=int, default=1_000_000)
    args = ap.parse_args()
    now = time.time()
    if not os.path.exists(args.path):
        t = time.perf_counter()
        generate(args.path, args.rows, now)
        print(f"generated {args.rows:,} rows in {time.perf_counter() - t:.1f}s")
    print(f"file: {os.path.getsize(args.path) / 1e6:.0f} MB")
    with errands.Queue(args.path) as q:
        for i in range(3):
            t = time.perf_counter()
            st = q.stats()
            took = time.perf_counter() - t
            print(f"stats #{i + 1}: {took * 1000:.0f} ms (counts {st['counts']})")
        for name in ("count_by_state", "top_errors", "retry_histogram", "finished_since"):
            t = time.perf_counter()
            with q.backend._read() as conn:  # type: ignore[attr-defined]
                conn.execute(
                    q.backend.q[name],  # type: ignore[attr-defined]
                    {"since": now - 86400, "limit": 10},
                ).fetchall()
            print(f"  {name}: {(time.perf_counter() - t) * 1000:.0f} ms")
    retention = {"succeeded": 29 * 86400, "failed": 29 * 86400, "cancelled": 29 * 86400}
    with errands.Queue(args.path, retention=retention) as q:
        t = time.perf_counter()
        report = q.prune(now=now, batch_size=1000)
        took = time.perf_counter() - t
        print(
            f"prune oldest day: {report.total:,} rows in {report.batches} batches, "
            f"{took:.1f}s ({took / max(report.batches, 1) * 1000:.1f} ms per batch), "
            f"checkpointed={report.checkpointed}"
        )


if __name__ == "__main__":
    main()
