"""Dependencies against the same jobs without them (issue #24): a fan-in (a batch of N members
and a callback) and N two-step chains (up → down), enqueued and then processed by one
in-process worker, against N (or 2N) plain jobs.

    python scripts/bench_deps.py [--db sqlite|postgresql://…] [--n 10000] [--rounds 1]

Each case runs on a fresh database (a temp SQLite file, or a new PostgreSQL database next to
the one given). Enqueue: the batch is one ``q.batch`` block; the chains are two
``enqueue_many`` calls (the ups, then the downs ``after=[up]``). Process: a burst worker
(``concurrency=8``; ``--processes P``: P of them, each in a process of its own) runs every
job; its wall time gives jobs per second. Ratios: the plain jobs' time over the dependent
ones' (1.0: no cost).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import tempfile
import time
import uuid
from collections.abc import Callable
from typing import Any

import errands


def fresh(spec: str) -> tuple[str, Callable[[], None]]:
    if spec == "sqlite":
        directory = tempfile.mkdtemp(prefix="bench-deps-")
        return os.path.join(directory, "bench.db"), lambda: None
    import psycopg

    name = f"bench_deps_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(spec, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    base = spec.rsplit("/", 1)[0]

    def drop() -> None:
        with psycopg.connect(spec, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    return f"{base}/{name}", drop


def queue(url: str) -> errands.Queue:
    q = errands.Queue(url)

    @q.task()
    def work(i: int = 0) -> int:
        return i

    @q.task()
    def done() -> None:
        return None

    return q


def burst(url: str) -> None:
    with queue(url) as q:
        q.run_worker(burst=True, concurrency=8, handle_signals=False)


def run(spec: str, enqueue: Callable[[errands.Queue], int], processes: int = 1) -> dict[str, float]:
    url, drop = fresh(spec)
    try:
        with queue(url) as q:
            t0 = time.perf_counter()
            jobs = enqueue(q)
            t1 = time.perf_counter()
            if processes == 1:
                q.run_worker(burst=True, concurrency=8, handle_signals=False)
            else:  # several worker processes finishing members of one fan-in at once
                ctx = multiprocessing.get_context("spawn")
                procs = [ctx.Process(target=burst, args=(url,)) for _ in range(processes)]
                for proc in procs:
                    proc.start()
                for proc in procs:
                    proc.join()
                burst(url)  # whatever a process's burst ended too early for
            t2 = time.perf_counter()
            left = q.stats()["counts"]
            assert left["succeeded"] == jobs, left
        return {"jobs": jobs, "enqueue_s": t1 - t0, "process_s": t2 - t1}
    finally:
        drop()


def plain(n: int) -> Callable[[errands.Queue], int]:
    def go(q: errands.Queue) -> int:
        q.enqueue_many([("work", {"i": i}) for i in range(n)])
        return n

    return go


def batch(n: int) -> Callable[[errands.Queue], int]:
    def go(q: errands.Queue) -> int:
        with q.batch(on_complete=("done", {})) as b:
            for i in range(n):
                b.enqueue("work", {"i": i})
        return n + 1

    return go


def chains(n: int) -> Callable[[errands.Queue], int]:
    def go(q: errands.Queue) -> int:
        ups = q.enqueue_many([("work", {"i": i}) for i in range(n)])
        q.enqueue_many([("work", {"i": i}, {"after": [u]}) for i, u in enumerate(ups)])
        return 2 * n

    return go


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--db", default="sqlite")
    p.add_argument("--n", type=int, default=10000)
    p.add_argument("--processes", type=int, default=1, help="worker processes (default 1)")
    p.add_argument(
        "--plain-only",
        action="store_true",
        help="only the plain jobs (to compare the worker's hot path with an errands "
        "without dependencies: PYTHONPATH=/path/to/other/src)",
    )
    args = p.parse_args()
    n = args.n
    if args.plain_only:
        for _ in range(3):
            r = run(args.db, plain(2 * n))
            print(f"plain {2 * n}: process {r['jobs'] / r['process_s']:8.0f} jobs/s")
        return
    cases: dict[str, Any] = {
        f"plain {n}": plain(n),
        f"batch of {n} + callback": batch(n),
        f"plain {2 * n}": plain(2 * n),
        f"{n} two-step chains": chains(n),
    }
    got = {name: run(args.db, fn, args.processes) for name, fn in cases.items()}
    for name, r in got.items():
        print(
            f"{name:<28} enqueue {r['enqueue_s']:7.3f} s  process {r['process_s']:7.3f} s "
            f"({r['jobs'] / r['process_s']:8.0f} jobs/s)"
        )
    for dep, base in (
        (f"batch of {n} + callback", f"plain {n}"),
        (f"{n} two-step chains", f"plain {2 * n}"),
    ):
        d, b = got[dep], got[base]
        print(
            f"{dep}: enqueue {b['enqueue_s'] / d['enqueue_s']:.2f}x, "
            f"process {(d['jobs'] / d['process_s']) / (b['jobs'] / b['process_s']):.2f}x "
            f"of {base} (jobs per second)"
        )


if __name__ == "__main__":
    main()
