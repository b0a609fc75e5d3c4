#!/usr/bin/env python3
"""Flat cost: does processing slow down when the file is full of history?

    .venv/bin/python scripts/bench_flat.py [--finished 1000000] [--queued 100000] [--dir D]

Builds two SQLite files with errands' schema: an empty one, and one holding ``--finished``
succeeded jobs (each with its attempt row and CLAIMED and SUCCEEDED events, as errands
writes them by default) written with plain SQL. Then ``--queued`` no-op jobs are enqueued
with ``enqueue_many`` into each and drained by ``run_worker(burst=True)``, alternating
empty/full twice; prints jobs/s for each and the ratio full/empty, and how long ``q.stats()``
takes on the full file.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import tempfile
import time

import errands

BUILD = [
    # Finished history, oldest first, a day before now; ids 1..N.
    """WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < :count)
    INSERT INTO jobs (id, queue, type, payload, status, priority, attempts, max_attempts,
                      run_at, created_at, started_at, finished_at, worker_id)
    SELECT i, 'default', 'noop', '{"i":' || i || '}', 'succeeded', 0, 1, 20,
           :t0 + i * 0.01, :t0 + i * 0.01, :t0 + i * 0.01 + 0.001, :t0 + i * 0.01 + 0.002, 'w'
    FROM n""",
    """INSERT INTO job_attempts (job_id, attempt, worker_id, started_at, finished_at, status)
    SELECT id, 1, 'w', started_at, finished_at, 'succeeded' FROM jobs""",
    """INSERT INTO job_events (job_id, ts, event, actor, detail)
    SELECT id, started_at, 'CLAIMED', 'w', '{"attempt":1}' FROM jobs""",
    """INSERT INTO job_events (job_id, ts, event, actor, detail)
    SELECT id, finished_at, 'SUCCEEDED', 'w', '{"attempt":1}' FROM jobs""",
]


def build_full(path: str, finished: int) -> float:
    errands.Queue(path).close()
    start = time.perf_counter()
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("BEGIN IMMEDIATE")
        t0 = time.time() - 86400 - finished * 0.01
        for statement in BUILD:
            conn.execute(statement, {"count": finished, "t0": t0})
        conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("ANALYZE")
    finally:
        conn.close()
    with errands.Queue(path) as q:
        q.recount_figures()  # rows written by plain SQL: count them as errands' writes would
    return time.perf_counter() - start


def drain(path: str, queued: int) -> float:
    q = errands.Queue(path)

    @q.task
    def noop(i: int = 0) -> None:
        return None

    try:
        q.enqueue_many([("noop", {"i": i}) for i in range(queued)])
        start = time.perf_counter()
        summary = q.run_worker(burst=True, handle_signals=False)
        took = time.perf_counter() - start
        if summary.succeeded != queued:
            raise RuntimeError(f"processed {summary.succeeded} of {queued}")
        return queued / took
    finally:
        q.close()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--finished", type=int, default=1_000_000)
    p.add_argument("--queued", type=int, default=100_000)
    p.add_argument("--dir")
    a = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="errands-flat-", dir=a.dir) as tmp:
        full = os.path.join(tmp, "full.db")
        built = build_full(full, a.finished)
        print(f"built {a.finished:,} finished jobs in {built:.1f}s", flush=True)
        rates: dict[str, list[float]] = {"empty": [], "full": []}
        for run in range(2):
            empty = os.path.join(tmp, f"empty{run}.db")
            rates["empty"].append(drain(empty, a.queued))
            os.remove(empty)
            rates["full"].append(drain(full, a.queued))
            print(
                f"run {run + 1}: empty {rates['empty'][-1]:,.0f}/s, "
                f"full {rates['full'][-1]:,.0f}/s",
                flush=True,
            )
        with errands.Queue(full) as q:
            start = time.perf_counter()
            q.stats()
            stats_ms = (time.perf_counter() - start) * 1000
        empty_best, full_best = max(rates["empty"]), max(rates["full"])
        result = {
            "finished": a.finished,
            "queued": a.queued,
            "empty_per_second": [round(x) for x in rates["empty"]],
            "full_per_second": [round(x) for x in rates["full"]],
            "ratio_best": round(full_best / empty_best, 3),
            "stats_ms_on_full": round(stats_ms, 1),
            "file_mb": round(os.path.getsize(full) / 2**20, 1),
        }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
