"""The enqueue and processing paths' client CPU per job, for an A/B of two trees (issue #31):

    PYTHONPATH=/path/to/tree/src python scripts/bench_front_door.py sqlite|postgresql://… [N]

Each run is one process on a fresh database (SQLite with ``durability="normal"``, so the fsync
does not hide the Python cost): ``one`` (``task.enqueue`` with no options), ``one_opts``
(``q.enqueue`` with ``priority=`` and ``delay=``: the options value built per call),
``one_limited`` (a task with a ``Limit`` and a group), ``many`` and ``many_limited``
(``enqueue_many`` of 10·N jobs), and ``process`` (a burst worker in-process draining N jobs).
Figures are CPU µs per job (``time.process_time``): on a shared host, wall time swings more
than the difference measured. Run it alternately on the two trees (A B B A A B) and compare
within pairs.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from typing import Any

import errands


def fresh(spec: str) -> errands.Queue:
    if spec == "sqlite":
        return errands.Queue(os.path.join(tempfile.mkdtemp(), "a.db"), durability="normal")
    import psycopg

    name = "bench_" + uuid.uuid4().hex[:8]
    with psycopg.connect(spec, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")  # a fixed prefix and hex: no user text
    return errands.Queue(spec.rsplit("/", 1)[0] + "/" + name)


def cpu_per_job(n: int, run: Callable[[], Any]) -> float:
    start = time.process_time()
    run()
    return round((time.process_time() - start) / n * 1e6, 2)


def main(spec: str, n: int) -> dict[str, float]:
    q = fresh(spec)

    @q.task
    def t(i: int = 0) -> None: ...

    @q.task(limit=errands.Limit("k", running=5, group="i"))
    def lim(i: int = 0) -> None: ...

    out = {
        "one": cpu_per_job(n, lambda: [t.enqueue(i=i) for i in range(n)]),
        "one_opts": cpu_per_job(
            n, lambda: [q.enqueue("t", {"i": i}, priority=3, delay=0) for i in range(n)]
        ),
        "one_limited": cpu_per_job(n, lambda: [lim.enqueue(i=i % 7) for i in range(n)]),
        "many": cpu_per_job(
            10 * n, lambda: q.enqueue_many([("t", {"i": i}) for i in range(10 * n)])
        ),
        "many_limited": cpu_per_job(
            10 * n, lambda: q.enqueue_many([("lim", {"i": i % 7}) for i in range(10 * n)])
        ),
    }
    q.close()
    q = fresh(spec)

    @q.task(name="t")
    def t2(i: int = 0) -> None: ...

    q.enqueue_many([("t", {"i": i}) for i in range(n)])
    out["process"] = cpu_per_job(
        n, lambda: q.run_worker(concurrency=8, burst=True, handle_signals=False)
    )
    q.close()
    return out


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 3000)))
