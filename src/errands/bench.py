"""``errands bench``: enqueue, processing and pickup latency on this machine.

Every phase uses its own fresh SQLite file in a temporary directory, with the same pragmas
errands uses (WAL; synchronous FULL or NORMAL), so the raw-insert baseline is comparable:

- raw_insert: stdlib sqlite3, one ``BEGIN IMMEDIATE; INSERT; COMMIT`` per row into a bare
  four-column table — the floor under any durable enqueue (each commit waits for the disk).
- raw_job_insert: the same, but the row goes into errands' own ``jobs`` table (its indexes
  included) — what storing the job costs before errands adds its event row and checks.
- enqueue: ``q.enqueue`` one by one (each is committed when it returns).
- enqueue_many: one ``q.enqueue_many`` call for all jobs (one transaction).
- process: ``run_worker(burst=True)`` draining N no-op jobs.
- latency: a worker waits; jobs are enqueued one at a time and the time from ``enqueue``
  returning (committed) to the handler starting is measured — from the same Queue object
  (in-process wake-up) and from another Queue on the same file (the path another process's
  enqueue takes).
"""

from __future__ import annotations

import os
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from typing import Any

from . import __version__
from .backends.sqlite import filesystem_type
from .cli import output
from .queue import Queue
from .states import DEFAULT_AUDIT, Event
from .worker import Worker

LATENCY_TIMEOUT = 10.0  # seconds to wait for one job's pickup before the bench gives up


def _rate(n: int, seconds: float) -> dict[str, float]:
    return {"seconds": round(seconds, 4), "per_second": round(n / seconds, 1) if seconds else 0.0}


def raw_insert(path: str, n: int, durability: str) -> dict[str, float]:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(f"PRAGMA synchronous = {'FULL' if durability == 'full' else 'NORMAL'}")
        conn.execute(
            "CREATE TABLE t (id INTEGER PRIMARY KEY, type TEXT, payload TEXT, created_at REAL)"
        )
        start = time.perf_counter()
        for i in range(n):
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(
                "INSERT INTO t (type, payload, created_at) VALUES (?, ?, ?)",
                ("noop", f'{{"i": {i}}}', time.time()),
            )
            conn.execute("COMMIT")
        return _rate(n, time.perf_counter() - start)
    finally:
        conn.close()


def raw_job_insert(path: str, n: int, durability: str) -> dict[str, float]:
    Queue(path, durability=durability).close()  # create errands' schema, then insert raw
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute(f"PRAGMA synchronous = {'FULL' if durability == 'full' else 'NORMAL'}")
        start = time.perf_counter()
        for i in range(n):
            now = time.time()
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(
                "INSERT INTO jobs (queue, type, payload, run_at, created_at) "
                "VALUES ('default', 'noop', ?, ?, ?)",
                (f'{{"i": {i}}}', now, now),
            )
            conn.execute("COMMIT")
        return _rate(n, time.perf_counter() - start)
    finally:
        conn.close()


def enqueue_one_by_one(
    path: str, n: int, durability: str, *, audit: list[str] | None = None
) -> dict[str, float]:
    with Queue(path, durability=durability, audit=audit) as q:
        start = time.perf_counter()
        for i in range(n):
            q.enqueue("noop", {"i": i})
        return _rate(n, time.perf_counter() - start)


def enqueue_bulk(q: Queue, n: int) -> dict[str, float]:
    items = [("noop", {"i": i}) for i in range(n)]
    start = time.perf_counter()
    q.enqueue_many(items)
    return _rate(n, time.perf_counter() - start)


def _noop_queue(path: str, durability: str) -> Queue:
    q = Queue(path, durability=durability)

    @q.task
    def noop(i: int = 0) -> None:
        return None

    return q


def process(q: Queue, n: int, concurrency: int) -> dict[str, float]:
    start = time.perf_counter()
    summary = q.run_worker(concurrency=concurrency, burst=True, handle_signals=False)
    took = time.perf_counter() - start
    if summary.succeeded != n:
        raise RuntimeError(f"bench processed {summary.succeeded} of {n} jobs; see the worker log")
    return _rate(n, took)


def latency(path: str, n: int, durability: str, *, same_queue: bool) -> dict[str, float]:
    started: dict[int, float] = {}
    arrived = threading.Event()
    q = Queue(path, durability=durability)

    @q.task
    def ping(i: int) -> None:
        started[i] = time.perf_counter()
        arrived.set()

    producer = q if same_queue else Queue(path, durability=durability)
    worker = Worker(q, concurrency=1, handle_signals=False)
    thread = threading.Thread(target=worker.run, name="errands-bench-worker")
    thread.start()
    samples: list[float] = []
    try:
        time.sleep(0.2)  # let the worker reach its idle wait, as a real idle worker would be
        for i in range(n):
            arrived.clear()
            producer.enqueue("ping", {"i": i})
            committed = time.perf_counter()
            if not arrived.wait(LATENCY_TIMEOUT):
                raise RuntimeError(f"job {i} was not picked up within {LATENCY_TIMEOUT}s")
            samples.append(started[i] - committed)
            time.sleep(0.005)  # a gap, so each job finds the worker idle
    finally:
        worker.stop()
        thread.join()
        if producer is not q:
            producer.close()
        q.close()
    samples.sort()
    ms = [s * 1000 for s in samples]
    return {
        "samples": n,
        "median_ms": round(statistics.median(ms), 3),
        "p95_ms": round(ms[min(len(ms) - 1, int(0.95 * len(ms)))], 3),
        "max_ms": round(ms[-1], 3),
    }


def filesystem_of(path: str) -> str:
    return filesystem_type(path) or "unknown"


def measure(
    *, jobs: int, concurrency: int, durability: str, latency_jobs: int, directory: str | None
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="errands-bench-", dir=directory) as tmp:
        raw = raw_insert(os.path.join(tmp, "raw.db"), jobs, durability)
        raw_job = raw_job_insert(os.path.join(tmp, "rawjob.db"), jobs, durability)
        one = enqueue_one_by_one(os.path.join(tmp, "enqueue.db"), jobs, durability)
        # The same without the ENQUEUED audit row: what that row costs per durable commit.
        quiet = [e.value for e in DEFAULT_AUDIT if e is not Event.ENQUEUED]
        one_quiet = enqueue_one_by_one(
            os.path.join(tmp, "enqueue-quiet.db"), jobs, durability, audit=quiet
        )
        with _noop_queue(os.path.join(tmp, "process.db"), durability) as q:
            bulk = enqueue_bulk(q, jobs)
            done = process(q, jobs, concurrency)
        lat_same = latency(os.path.join(tmp, "lat1.db"), latency_jobs, durability, same_queue=True)
        lat_other = latency(
            os.path.join(tmp, "lat2.db"), latency_jobs, durability, same_queue=False
        )
        fs = filesystem_of(tmp)
    return {
        "jobs": jobs,
        "concurrency": concurrency,
        "durability": durability,
        "filesystem": fs,
        "raw_insert": raw,
        "raw_job_insert": raw_job,
        "enqueue": one,
        "enqueue_without_enqueued_event": one_quiet,
        "enqueue_many": bulk,
        "process": done,
        "enqueue_vs_raw_insert": round(one["per_second"] / raw["per_second"], 3),
        "enqueue_vs_raw_job_insert": round(one["per_second"] / raw_job["per_second"], 3),
        "latency": {"same_queue": lat_same, "other_connection": lat_other},
        "versions": {
            "errands": __version__,
            "python": sys.version.split()[0],
            "sqlite": sqlite3.sqlite_version,
        },
    }


def report(r: dict[str, Any]) -> None:
    print(
        f"errands bench: {r['jobs']} jobs, durability={r['durability']} "
        f"(synchronous={r['durability'].upper()}), concurrency {r['concurrency']}, "
        f"on {r['filesystem']}; errands {r['versions']['errands']}, "
        f"SQLite {r['versions']['sqlite']}, Python {r['versions']['python']}\n"
    )
    rows = [
        ("raw sqlite3 insert, bare table, 1 tx/row", r["raw_insert"]),
        ("raw sqlite3 insert into jobs, 1 tx/row", r["raw_job_insert"]),
        ("q.enqueue one by one", r["enqueue"]),
        ("q.enqueue, audit without ENQUEUED", r["enqueue_without_enqueued_event"]),
        ("q.enqueue_many (one tx)", r["enqueue_many"]),
        ("process no-op jobs (burst)", r["process"]),
    ]
    output.table(
        ["PHASE", "SECONDS", "JOBS/S"],
        [(name, f"{m['seconds']:.3f}", f"{m['per_second']:,.0f}") for name, m in rows],
        right=(1, 2),
    )
    print(
        f"\nenqueue / raw insert: {r['enqueue_vs_raw_insert']:.2f}x (bare table), "
        f"{r['enqueue_vs_raw_job_insert']:.2f}x (jobs table)\n"
    )
    lat = r["latency"]
    output.table(
        ["PICKUP LATENCY (enqueue committed → handler starts)", "MEDIAN", "P95", "MAX"],
        [
            (
                f"{label} ({m['samples']} jobs)",
                f"{m['median_ms']:.2f} ms",
                f"{m['p95_ms']:.2f} ms",
                f"{m['max_ms']:.2f} ms",
            )
            for label, m in (
                ("same Queue (in-process wake-up)", lat["same_queue"]),
                ("another connection (as another process)", lat["other_connection"]),
            )
        ],
        right=(1, 2, 3),
    )


def run_bench(
    *,
    jobs: int,
    concurrency: int,
    durability: str,
    latency_jobs: int,
    directory: str | None,
    as_json: bool,
) -> int:
    result = measure(
        jobs=jobs,
        concurrency=concurrency,
        durability=durability,
        latency_jobs=latency_jobs,
        directory=directory,
    )
    if as_json:
        output.emit_json(result)
    else:
        report(result)
    return 0
