"""``errands bench --long-transaction``: steady load on PostgreSQL while another connection
holds a snapshot open, the way a long report, ``pg_dump`` or a replica's feedback holds back
VACUUM.

One fresh schema. First the capacity: ``--jobs`` no-op jobs drained by one ``errands worker``
process. Then that worker keeps running while producer threads enqueue one job per call at
``--load`` of that capacity (or ``--rate`` jobs/s), paced to a schedule, through three phases:

- ``normal`` (``--phase`` long): nothing held;
- ``held`` (``--hold`` long): a REPEATABLE READ transaction on another connection has read
  the jobs table and stays open, so no row version dead since then can be reclaimed;
- ``released`` (``--phase`` long): that transaction committed.

Every ``--sample`` seconds, and per phase: jobs enqueued and finished per second, pickup lag
(``started_at - run_at`` of the jobs that started in the window: p50/p99 in ms), the jobs
table's dead tuples (``pg_stat_user_tables``, as the statistics collector last saw them), and
the size of the table and of its indexes. Per phase also the index entries each of the jobs
table's indexes returned per second (``pg_stat_user_indexes.idx_tup_read``): what still reads
dead entries while the snapshot is held.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ...queue import Queue
from . import Databases, process, progress, worker_processes

PRODUCERS = 4  # threads: one-by-one enqueues at half of a worker's capacity outrun one thread
PHASES = ("normal", "held", "released")
MB = 1024 * 1024


@dataclass(frozen=True)
class ChurnSettings:
    """What ``errands bench --long-transaction`` runs: load, phase lengths, sampling."""

    jobs: int
    load: float
    rate: float | None
    phase_seconds: float
    hold_seconds: float
    sample_seconds: float
    concurrency: int


class Producer:
    """PRODUCERS threads enqueueing one job per call on a shared schedule of ``rate`` jobs/s
    (a thread that falls behind catches up at once, so the offered load is the schedule's)."""

    def __init__(self, url: str, rate: float) -> None:
        self._url, self._rate = url, rate
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.enqueued = 0
        self._lock = threading.Lock()

    def __enter__(self) -> Producer:
        self._queue = Queue(self._url)
        self._start = time.monotonic()
        for k in range(PRODUCERS):
            t = threading.Thread(target=self._run, args=(k,), daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def _run(self, k: int) -> None:
        gap = PRODUCERS / self._rate
        due = self._start + k / self._rate
        self._queue.get(1)  # this thread's connection, opened before its first enqueue
        while not self._stop.is_set():
            wait = due - time.monotonic()
            if wait > 0 and self._stop.wait(wait):
                break
            self._queue.enqueue("noop", {})
            with self._lock:
                self.enqueued += 1
            due += gap

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(30)
        self._queue.close()


@contextlib.contextmanager
def held_snapshot(url: str) -> Iterator[None]:
    """A REPEATABLE READ transaction that has taken its snapshot, open until the block ends."""
    import psycopg

    with psycopg.connect(url) as conn:
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        conn.execute("SELECT count(*) FROM jobs").fetchone()
        try:
            yield
        finally:
            conn.rollback()


STARTED = """
SELECT count(*),
       percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM started_at - run_at)),
       percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM started_at - run_at))
FROM jobs WHERE started_at >= to_timestamp(%(t0)s) AND started_at < to_timestamp(%(t1)s)
"""
FINISHED = """
SELECT count(*) FROM jobs
WHERE finished_at >= to_timestamp(%(t0)s) AND finished_at < to_timestamp(%(t1)s)
"""
TABLE = """
SELECT coalesce(s.n_dead_tup, 0), coalesce(s.n_live_tup, 0),
       pg_table_size('jobs'), pg_indexes_size('jobs')
FROM pg_stat_user_tables s WHERE s.relid = 'jobs'::regclass
"""

INDEXES = """
SELECT indexrelname, idx_scan, idx_tup_read FROM pg_stat_user_indexes
WHERE relid = 'jobs'::regclass
"""


def index_reads(conn: Any) -> dict[str, tuple[int, int]]:
    """Scans and entries returned so far, per index of the jobs table (of this schema)."""
    return {str(r[0]): (int(r[1]), int(r[2])) for r in conn.execute(INDEXES).fetchall()}


def index_rates(
    before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]], seconds: float
) -> dict[str, dict[str, float]]:
    """Per index that was read: scans and entries per second, and entries per scan."""
    out: dict[str, dict[str, float]] = {}
    for name, (scans, read) in sorted(after.items()):
        s0, r0 = before.get(name, (0, 0))
        if read - r0 <= 0:
            continue
        n = max(scans - s0, 1)
        out[name] = {
            "scans_per_second": round((scans - s0) / seconds, 1),
            "entries_per_second": round((read - r0) / seconds, 1),
            "entries_per_scan": round((read - r0) / n, 1),
        }
    return out


def _ms(seconds: Any) -> float | None:
    return None if seconds is None else round(float(seconds) * 1000, 1)


def sample(conn: Any, t0: float, t1: float) -> dict[str, Any]:
    """The figures of the window [t0, t1) (unix seconds), and the table as it is now."""
    started, p50, p99 = conn.execute(STARTED, {"t0": t0, "t1": t1}).fetchone()
    (finished,) = conn.execute(FINISHED, {"t0": t0, "t1": t1}).fetchone()
    dead, live, table, indexes = conn.execute(TABLE).fetchone()
    span = t1 - t0
    return {
        "finished_per_second": round(finished / span, 1),
        "started": int(started),
        "pickup_p50_ms": _ms(p50),
        "pickup_p99_ms": _ms(p99),
        "dead_tuples": int(dead),
        "live_tuples": int(live),
        "table_mb": round(table / MB, 2),
        "indexes_mb": round(indexes / MB, 2),
    }


def run_phase(
    conn: Any, producer: Producer, name: str, seconds: float, every: float
) -> dict[str, Any]:
    """One phase: its samples, then its own figures over the whole phase."""
    start, enq0 = time.time(), producer.enqueued
    before = conn.execute(TABLE).fetchone()
    reads_before = index_reads(conn)
    samples: list[dict[str, Any]] = []
    t0, enq = start, enq0
    while t0 < start + seconds - 1e-6:
        t1 = min(t0 + every, start + seconds)
        time.sleep(max(0.0, t1 - time.time()))
        now_enq = producer.enqueued
        s: dict[str, Any] = {"t": round(t1 - start, 1)}
        s["enqueued_per_second"] = round((now_enq - enq) / (t1 - t0), 1)
        s.update(sample(conn, t0, t1))
        samples.append(s)
        progress(
            f"{name} {s['t']:>6.1f}s: {s['enqueued_per_second']:,.0f} in/s, "
            f"{s['finished_per_second']:,.0f} done/s, pickup p50 {s['pickup_p50_ms']} ms "
            f"p99 {s['pickup_p99_ms']} ms, {s['dead_tuples']:,} dead, "
            f"{s['table_mb'] + s['indexes_mb']:.1f} MB"
        )
        t0, enq = t1, now_enq
    end = time.time()
    whole = sample(conn, start, end)
    after = conn.execute(TABLE).fetchone()
    reads = index_rates(reads_before, index_reads(conn), end - start)
    grew = (after[2] + after[3] - before[2] - before[3]) / MB
    p50s = [s["pickup_p50_ms"] for s in samples if s["pickup_p50_ms"] is not None]
    p99s = [s["pickup_p99_ms"] for s in samples if s["pickup_p99_ms"] is not None]
    return {
        "seconds": round(end - start, 1),
        "enqueued_per_second": round((producer.enqueued - enq0) / (end - start), 1),
        **whole,
        "worst_sample_p50_ms": max(p50s, default=None),
        "worst_sample_p99_ms": max(p99s, default=None),
        "grew_mb": round(grew, 2),
        "grew_mb_per_second": round(grew / (end - start), 3),
        "index_reads": reads,
        "samples": samples,
    }


def measure_churn(url: str, settings: ChurnSettings, directory: str | None) -> dict[str, Any]:
    import psycopg

    dbs = Databases(url, directory)
    try:
        progress(f"capacity: {settings.jobs:,} jobs, 1 worker process …")
        capacity = process(dbs, "capacity", settings.jobs, "full", 1, settings.concurrency)
        rate = settings.rate or settings.load * float(capacity["per_second"])
        progress(f"capacity {capacity['per_second']:,.0f} jobs/s; offering {rate:,.0f} jobs/s")
        db = dbs.fresh("churn")
        Queue(db).close()  # migrated before the worker starts
        with psycopg.connect(db, autocommit=True) as conn:
            row = conn.execute("SHOW autovacuum").fetchone()
            autovacuum = str(row[0]) if row else "unknown"
            phases: dict[str, Any] = {}
            with (
                worker_processes(dbs, db, "full", 1, settings.concurrency),
                Producer(db, rate) as producer,
            ):
                phases["normal"] = run_phase(
                    conn, producer, "normal", settings.phase_seconds, settings.sample_seconds
                )
                with held_snapshot(db):
                    phases["held"] = run_phase(
                        conn, producer, "held", settings.hold_seconds, settings.sample_seconds
                    )
                phases["released"] = run_phase(
                    conn, producer, "released", settings.phase_seconds, settings.sample_seconds
                )
    finally:
        dbs.close()
    return {
        "backend": "postgres",
        "capacity_per_second": capacity["per_second"],
        "offered_per_second": round(rate, 1),
        "producers": PRODUCERS,
        "concurrency": settings.concurrency,
        "autovacuum": autovacuum,
        "cpus": os.cpu_count(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "phases": phases,
    }


def report_churn(result: dict[str, Any]) -> None:
    print(
        f"PostgreSQL under a long transaction: capacity {result['capacity_per_second']:,.0f} "
        f"jobs/s (1 worker process), offered {result['offered_per_second']:,.0f} jobs/s by "
        f"{result['producers']} producer threads; server autovacuum={result['autovacuum']}; "
        f"load average {result['load_average']}"
    )
    print(
        f"{'phase':<9} {'s':>6} {'in/s':>7} {'done/s':>7} {'p50 ms':>7} {'p99 ms':>7} "
        f"{'worst p50':>9} {'worst p99':>9} {'dead':>9} {'MB':>7} {'grew MB/s':>9}"
    )
    for name in PHASES:
        p = result["phases"][name]
        print(
            f"{name:<9} {p['seconds']:>6.0f} {p['enqueued_per_second']:>7.0f} "
            f"{p['finished_per_second']:>7.0f} {p['pickup_p50_ms']!s:>7} "
            f"{p['pickup_p99_ms']!s:>7} {p['worst_sample_p50_ms']!s:>9} "
            f"{p['worst_sample_p99_ms']!s:>9} {p['dead_tuples']:>9,} "
            f"{p['table_mb'] + p['indexes_mb']:>7.1f} {p['grew_mb_per_second']:>9.3f}"
        )
    print("index entries read per second (per scan), by phase:")
    for name in PHASES:
        reads = result["phases"][name].get("index_reads", {})
        busiest = sorted(reads.items(), key=lambda kv: -kv[1]["entries_per_second"])[:4]
        shown = ", ".join(
            f"{ix} {r['entries_per_second']:,.0f} ({r['entries_per_scan']:,.1f})"
            for ix, r in busiest
        )
        print(f"  {name:<9} {shown}")
