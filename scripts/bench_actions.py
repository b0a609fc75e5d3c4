"""Time the operator's job edits (issue #25) on many ids: ``q.set_priority``, ``q.run_now`` and
``q.delete`` (queued jobs, then finished ones, whose outcomes are taken off the figures and
rolled up first), each over ``--jobs`` ids in its chunks of 500 per transaction.

    python scripts/bench_actions.py --db /tmp/actions.db [--jobs 10000]
    python scripts/bench_actions.py --db postgresql://postgres@127.0.0.1:5432/postgres

A fresh SQLite file (replaced), or on PostgreSQL a scratch database made for the run and
dropped after. Jobs are written through the API (``enqueue_many``); the finished ones are
claimed and completed through the backend's verbs, as a worker does. Prints one line per
action: ids, seconds, microseconds per id.
"""

from __future__ import annotations

import argparse
import os
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import errands
from errands.backends.base import ClaimRequest, Succeeded


@contextmanager
def database(url: str) -> Iterator[str]:
    if not url.startswith("postgres"):
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(url + suffix):
                os.remove(url + suffix)
        yield url
        return
    import psycopg

    name = f"errands_bench_actions_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    try:
        yield url.rsplit("/", 1)[0] + "/" + name
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE {name} WITH (FORCE)")


def timed(label: str, n: int, act: Callable[[], Any]) -> None:
    start = time.perf_counter()
    report = act()
    took = time.perf_counter() - start
    changed = len(report.changed)
    assert changed == n, (label, changed, n, list(report.refused.items())[:3])
    print(f"{label:<26} {n:>7,} ids  {took:7.3f} s  {took / n * 1e6:7.1f} µs/id")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", required=True)
    parser.add_argument("--jobs", type=int, default=10_000)
    args = parser.parse_args()
    n = args.jobs
    with database(args.db) as url, errands.Queue(url, durability="normal") as q:
        print(f"errands {errands.__version__}, {url.split('@')[-1]}, load {os.getloadavg()}")
        later = q.enqueue_many([("t", {"i": i}, {"delay": 3600}) for i in range(n)])
        done = q.enqueue_many([("d", {"i": i}) for i in range(n)])
        while True:
            held = q.backend.claim(ClaimRequest("bench", ["d"], None, 500, 60), q.clock())
            if not held:
                break
            now = q.clock()
            q.backend.finish([Succeeded(h.id, h.attempt, now, None) for h in held], "bench", now)
        timed("set_priority (queued)", n, lambda: q.set_priority(5, *later, actor="bench"))
        timed("run_now (queued, later)", n, lambda: q.run_now(*later, actor="bench"))
        timed("delete (queued)", n, lambda: q.delete(*later, actor="bench"))
        timed("delete (succeeded)", n, lambda: q.delete(*done, actor="bench"))


if __name__ == "__main__":
    main()
