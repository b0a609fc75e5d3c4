#!/usr/bin/env python3
"""One worker in this process, on a fresh SQLite file: jobs/s, CPU per job, batch sizes, and
(with ``--statements``) where the time goes, statement by statement.

    .venv/bin/python scripts/bench_worker.py [--jobs 20000] [--concurrency 8] [--statements]

``N`` no-op jobs are enqueued with ``enqueue_many``, then drained by one
``run_worker(burst=True)``. CPU is ``time.process_time()`` of this process over the drain, so
it includes SQLite's own work; it is steadier than the wall clock on a shared machine.
``--statements`` wraps the backend's connections to time each statement (the wrapping adds
a little Python per statement, not per job), summed per job and sorted by cost.
Compare runs only on one machine, alternating the versions you compare.
"""

from __future__ import annotations

import argparse
import collections
import os
import sqlite3
import tempfile
import time
from typing import Any

import errands
from errands.backends import sqlite as sqlite_backend


class TimedConnection:
    """A sqlite3 connection that adds each statement's wall time to ``spent``."""

    def __init__(self, conn: sqlite3.Connection, spent: dict[str, list[float]]) -> None:
        self._conn = conn
        self._spent = spent

    def _timed(self, label: str, run: Any, sql: str, *args: Any) -> Any:
        start = time.perf_counter()
        try:
            return run(sql, *args)
        finally:
            key = label + " ".join(sql.split())[:72]
            self._spent[key][0] += 1
            self._spent[key][1] += time.perf_counter() - start

    def execute(self, sql: str, *args: Any) -> Any:
        return self._timed("", self._conn.execute, sql, *args)

    def executemany(self, sql: str, *args: Any) -> Any:
        return self._timed("many: ", self._conn.executemany, sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=20_000)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--statements", action="store_true", help="time each statement")
    a = p.parse_args()
    spent: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0])
    if a.statements:
        connect = sqlite_backend.SQLiteBackend.connect

        def timed_connect(self: sqlite_backend.SQLiteBackend) -> Any:
            return TimedConnection(connect(self), spent)

        sqlite_backend.SQLiteBackend.connect = timed_connect  # type: ignore[method-assign]
    with tempfile.TemporaryDirectory(prefix="errands-worker-") as tmp:
        q = errands.Queue(f"sqlite:///{os.path.join(tmp, 'bench.db')}")

        @q.task
        def noop(i: int = 0) -> None:
            return None

        q.enqueue_many([("noop", {"i": i}) for i in range(a.jobs)])
        sizes: collections.Counter[int] = collections.Counter()
        finish_and_claim = q.backend.finish_and_claim

        def counted(outcomes: Any, *args: Any) -> Any:
            sizes[len(outcomes)] += 1
            return finish_and_claim(outcomes, *args)

        q.backend.finish_and_claim = counted  # type: ignore[method-assign]
        spent.clear()
        wall, cpu = time.perf_counter(), time.process_time()
        summary = q.run_worker(burst=True, concurrency=a.concurrency, handle_signals=False)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        q.close()
    if summary.succeeded != a.jobs:
        raise SystemExit(f"processed {summary.succeeded} of {a.jobs}")
    batches = sum(sizes.values())
    print(
        f"{a.jobs / wall:,.0f} jobs/s, {cpu * 1e6 / a.jobs:.1f} µs CPU per job, "
        f"{batches} outcome batches of {a.jobs / max(batches, 1):.0f} jobs on average"
    )
    for key, (count, seconds) in sorted(spent.items(), key=lambda kv: -kv[1][1])[:12]:
        print(f"{seconds * 1e6 / a.jobs:7.1f} µs/job {int(count):6d}x  {key}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
