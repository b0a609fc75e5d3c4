"""``errands bench``: errands against the bare database, on this machine, in one run.

Every phase gets a fresh database — a new SQLite file in a temporary directory, or a new
schema in the PostgreSQL database of ``--db`` (dropped afterwards) — with the durability
errands uses, so the ratios compare like with like:

- raw baselines (``bench_raw``): single-row inserts, one bulk insert, batched processing with
  the audit rows errands writes by default;
- ``enqueue`` one by one (each committed when it returns) and ``enqueue_many`` (one call);
- processing N no-op jobs by 1 and by P real ``errands worker`` processes (started first and
  idle; then the jobs are enqueued in one call and timed until the last one finishes);
- pickup latency: a separate producer process enqueues jobs one at a time with gaps; the time
  from ``enqueue`` returning to the handler starting in an idle worker process (p50/p95/p99);
- that idle worker's CPU over ``--idle-seconds``.

Each errands figure is also given as a ratio to its raw baseline. Progress goes to stderr.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

from . import __version__, bench_raw
from .backends.sqlite import filesystem_type
from .bench_app import DB_ENV, DURABILITY_ENV
from .queue import Queue

BATCH_LABEL = f"claims of {bench_raw.BATCH}"
STARTUP_TIMEOUT = 60.0  # seconds for worker processes to register
DRAIN_TIMEOUT = 600.0  # seconds for the workers to finish every job
PICKUP_GAP_MS = 25.0  # mean gap between the producer's enqueues (each finds the worker idle)


def progress(message: str) -> None:
    print(f"[errands bench] {message}", file=sys.stderr, flush=True)


def is_postgres(url: str | None) -> bool:
    return bool(url) and str(url).startswith(("postgresql://", "postgres://"))


class Databases:
    """Fresh databases, one per phase, and their cleanup."""

    def __init__(self, url: str | None, directory: str | None) -> None:
        self.postgres = is_postgres(url)
        self._base = url or ""
        self._tmp = tempfile.TemporaryDirectory(prefix="errands-bench-", dir=directory)
        self._schemas: list[str] = []
        self._tag = secrets.token_hex(3)

    def fresh(self, name: str) -> str:
        if not self.postgres:
            return os.path.join(self._tmp.name, f"{name}.db")
        import psycopg

        schema = f"errands_bench_{self._tag}_{name}"
        with psycopg.connect(self._base, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{schema}"')  # name built here, from [a-z0-9_] only
        self._schemas.append(schema)
        sep = "&" if "?" in self._base else "?"
        return f"{self._base}{sep}options=-csearch_path%3D{schema}"

    def scalar_row(self, url: str, sqlite_sql: str, postgres_sql: str) -> Any:
        return self.rows(url, sqlite_sql, postgres_sql)[0]

    def rows(self, url: str, sqlite_sql: str, postgres_sql: str) -> list[Any]:
        if not self.postgres:
            conn = sqlite3.connect(url, timeout=30)
            try:
                return conn.execute(sqlite_sql).fetchall()
            finally:
                conn.close()
        import psycopg

        with psycopg.connect(url, autocommit=True) as pg:
            return pg.execute(postgres_sql.encode()).fetchall()

    def close(self) -> None:
        if self._schemas:
            import psycopg

            with psycopg.connect(self._base, autocommit=True) as conn:
                for schema in self._schemas:
                    conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        self._tmp.cleanup()

    @property
    def directory(self) -> str:
        return self._tmp.name


# -- errands in this process ----------------------------------------------------------------


def enqueue_one_by_one(url: str, n: int, durability: str) -> dict[str, float]:
    with Queue(url, durability=durability) as q:
        start = time.perf_counter()
        for i in range(n):
            q.enqueue("noop", {"i": i})
        return bench_raw.rate(n, time.perf_counter() - start)


def enqueue_bulk(url: str, n: int, durability: str) -> dict[str, float]:
    items = [("noop", {"i": i}) for i in range(n)]
    with Queue(url, durability=durability) as q:
        start = time.perf_counter()
        q.enqueue_many(items)
        return bench_raw.rate(n, time.perf_counter() - start)


# -- errands worker processes ---------------------------------------------------------------


@contextlib.contextmanager
def worker_processes(
    dbs: Databases, url: str, durability: str, processes: int, concurrency: int
) -> Iterator[subprocess.Popen[bytes]]:
    """``errands worker`` (under its supervisor when P > 1), started and registered."""
    env = {**os.environ, DB_ENV: url, DURABILITY_ENV: durability}
    cmd = [sys.executable, "-m", "errands", "worker", "--app", "errands.bench_app:q"]
    cmd += ["--concurrency", str(concurrency), "--processes", str(processes), "--quiet"]
    log = open(os.path.join(dbs.directory, f"worker-{secrets.token_hex(3)}.log"), "wb")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while _live_workers(dbs, url) < processes:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"errands worker did not start; see {log.name}")
            time.sleep(0.05)
        time.sleep(0.3)  # past the first claim: idle, waiting for a wake-up
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()


def _live_workers(dbs: Databases, url: str) -> int:
    try:
        row = dbs.scalar_row(
            url,
            "SELECT count(*) FROM workers WHERE stopped_at IS NULL",
            "SELECT count(*) FROM workers WHERE stopped_at IS NULL",
        )
    except Exception:  # the schema is not there yet: the worker is still migrating
        return 0
    return int(row[0])


def _succeeded(dbs: Databases, url: str) -> tuple[int, float | None]:
    count, last = dbs.scalar_row(
        url,
        "SELECT count(*), max(finished_at) FROM jobs WHERE status = 'succeeded'",
        "SELECT count(*), extract(epoch FROM max(finished_at))::float8 FROM jobs "
        "WHERE status = 'succeeded'",
    )
    return int(count), None if last is None else float(last)


def process(
    dbs: Databases, name: str, n: int, durability: str, processes: int, concurrency: int
) -> dict[str, Any]:
    url = dbs.fresh(name)
    Queue(url, durability=durability).close()  # migrate before the workers race to
    items = [("noop", {"i": i}) for i in range(n)]
    with worker_processes(dbs, url, durability, processes, concurrency):
        with Queue(url, durability=durability) as q:
            q.enqueue_many(items)
            start = time.time()
        deadline = time.monotonic() + DRAIN_TIMEOUT
        while True:
            done, last = _succeeded(dbs, url)
            if done >= n or time.monotonic() > deadline:
                break
            time.sleep(0.02)
    took = (last or start) - start
    return {**bench_raw.rate(n, took), "completed": done}


def pickup_and_idle(
    dbs: Databases, samples: int, durability: str, concurrency: int, idle_seconds: float
) -> tuple[dict[str, Any], dict[str, Any]]:
    url = dbs.fresh("pickup")
    Queue(url, durability=durability).close()
    env = {**os.environ, DB_ENV: url, DURABILITY_ENV: durability}
    with worker_processes(dbs, url, durability, 1, concurrency) as worker:
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "errands.bench_app",
                "produce",
                str(samples),
                str(PICKUP_GAP_MS),
            ],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if out.returncode != 0:
            raise RuntimeError(f"the pickup producer failed: {out.stderr.strip()[-500:]}")
        import json

        committed = {int(i): t for i, t in json.loads(out.stdout)}
        deadline = time.monotonic() + 60
        while _succeeded(dbs, url)[0] < samples and time.monotonic() < deadline:
            time.sleep(0.02)
        started = dict(
            dbs.rows(
                url,
                "SELECT id, started_at FROM jobs WHERE status = 'succeeded'",
                "SELECT id, extract(epoch FROM started_at)::float8 FROM jobs "
                "WHERE status = 'succeeded'",
            )
        )
        time.sleep(1.0)  # the last outcome written: from here on it is idle
        cpu = idle_cpu(worker.pid, idle_seconds)
    ms = sorted((float(started[i]) - t) * 1000 for i, t in committed.items() if i in started)
    pickup = {
        "samples": samples,
        "completed": len(ms),
        "p50_ms": _pct(ms, 0.50),
        "p95_ms": _pct(ms, 0.95),
        "p99_ms": _pct(ms, 0.99),
        "max_ms": round(ms[-1], 3) if ms else None,
    }
    return pickup, {"seconds": idle_seconds, "cpu_percent": cpu}


def _pct(sorted_ms: list[float], q: float) -> float | None:
    if not sorted_ms:
        return None
    return round(sorted_ms[min(len(sorted_ms) - 1, int(q * len(sorted_ms)))], 3)


def idle_cpu(pid: int, seconds: float) -> float | None:
    """Percent of one core used by ``pid`` (utime + stime from /proc) over ``seconds``."""
    stat = f"/proc/{pid}/stat"
    if not os.path.exists(stat):
        time.sleep(seconds)
        return None

    def cpu() -> float:
        with open(stat) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    t0, c0 = time.monotonic(), cpu()
    time.sleep(seconds)
    return round((cpu() - c0) / (time.monotonic() - t0) * 100, 3)


# -- the run --------------------------------------------------------------------------------


def _timed(label: str, fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    progress(f"{label} …")
    result = fn()
    if "per_second" in result:
        progress(f"{label}: {result['per_second']:,.0f} jobs/s")
    return result


def measure(
    *,
    url: str | None,
    jobs: int,
    processes: int,
    concurrency: int,
    durability: str,
    latency_jobs: int,
    idle_seconds: float,
    directory: str | None,
) -> dict[str, Any]:
    dbs = Databases(url, directory)
    n = jobs
    try:
        raw: dict[str, Any] = {}
        if dbs.postgres:
            raw["insert"] = _timed(
                "raw insert", lambda: bench_raw.postgres_insert(dbs.fresh("raw_insert"), n)
            )
            raw["bulk_insert"] = _timed(
                "raw bulk insert", lambda: bench_raw.postgres_bulk_insert(dbs.fresh("raw_bulk"), n)
            )
            raw["process"] = _timed(
                "raw processing", lambda: bench_raw.postgres_process(dbs.fresh("raw_process"), n)
            )
        else:
            raw["insert"] = _timed(
                "raw insert",
                lambda: bench_raw.sqlite_insert(dbs.fresh("raw_insert"), n, durability),
            )
            raw["bulk_insert"] = _timed(
                "raw bulk insert",
                lambda: bench_raw.sqlite_bulk_insert(dbs.fresh("raw_bulk"), n, durability),
            )
            raw["process"] = _timed(
                "raw processing",
                lambda: bench_raw.sqlite_process(dbs.fresh("raw_process"), n, durability),
            )
        ours: dict[str, Any] = {}
        ours["enqueue"] = _timed(
            "enqueue one by one", lambda: enqueue_one_by_one(dbs.fresh("enqueue"), n, durability)
        )
        ours["enqueue_many"] = _timed(
            "enqueue_many", lambda: enqueue_bulk(dbs.fresh("enqueue_many"), n, durability)
        )
        ours["process_1"] = _timed(
            "processing, 1 worker process",
            lambda: process(dbs, "process_1", n, durability, 1, concurrency),
        )
        ours["process_p"] = _timed(
            f"processing, {processes} worker processes",
            lambda: process(dbs, "process_p", n, durability, processes, concurrency),
        )
        progress(f"pickup latency, {latency_jobs} jobs from another process …")
        pickup, idle = pickup_and_idle(dbs, latency_jobs, durability, concurrency, idle_seconds)
        progress(
            f"pickup p50 {pickup['p50_ms']} ms, p99 {pickup['p99_ms']} ms; "
            f"idle worker CPU {idle['cpu_percent']}%"
        )
        fs = "postgresql" if dbs.postgres else (filesystem_type(dbs.directory) or "unknown")
        versions = _versions(url if dbs.postgres else None)
    finally:
        dbs.close()

    def ratio(mine: str, base: str) -> float:
        return round(float(ours[mine]["per_second"]) / float(raw[base]["per_second"]), 3)

    return {
        "backend": "postgres" if dbs.postgres else "sqlite",
        "jobs": n,
        "processes": processes,
        "concurrency": concurrency,
        "durability": durability,
        "filesystem": fs,
        "cpus": os.cpu_count(),
        "load_average": [round(x, 2) for x in os.getloadavg()]
        if hasattr(os, "getloadavg")
        else None,
        "raw": raw,
        "errands": ours,
        "ratios": {
            "enqueue": ratio("enqueue", "insert"),
            "enqueue_many": ratio("enqueue_many", "bulk_insert"),
            "process_1": ratio("process_1", "process"),
            "process_p": ratio("process_p", "process"),
        },
        "pickup": pickup,
        "idle": idle,
        "versions": versions,
    }


def _versions(pg_url: str | None) -> dict[str, str]:
    out = {
        "errands": __version__,
        "python": sys.version.split()[0],
        "sqlite": sqlite3.sqlite_version,
    }
    if pg_url:
        import psycopg

        out["psycopg"] = psycopg.__version__
        with psycopg.connect(pg_url) as conn:
            row = conn.execute("SHOW server_version").fetchone()
            out["postgresql"] = str(row[0]) if row else "unknown"
    return out


def report(r: dict[str, Any]) -> None:
    from .cli import output

    v = r["versions"]
    print(
        f"errands bench: {r['backend']}, {r['jobs']} jobs, durability={r['durability']}, "
        f"{r['processes']} processes x concurrency {r['concurrency']}, on {r['filesystem']}; "
        f"errands {v['errands']}, Python {v['python']}, SQLite {v['sqlite']}"
        + (f", PostgreSQL {v['postgresql']}" if "postgresql" in v else "")
        + f"; {r['cpus']} CPUs, load average {r['load_average']}\n"
    )
    raw, ours, ratios = r["raw"], r["errands"], r["ratios"]
    rows = [
        (
            "enqueue one by one",
            ours["enqueue"],
            raw["insert"],
            ratios["enqueue"],
            "insert, 1 tx/row",
        ),
        (
            "enqueue_many",
            ours["enqueue_many"],
            raw["bulk_insert"],
            ratios["enqueue_many"],
            "bulk insert, 1 tx",
        ),
        (
            "process, 1 worker process",
            ours["process_1"],
            raw["process"],
            ratios["process_1"],
            BATCH_LABEL,
        ),
        (
            f"process, {r['processes']} worker processes",
            ours["process_p"],
            raw["process"],
            ratios["process_p"],
            BATCH_LABEL,
        ),
    ]
    output.table(
        ["PHASE", "ERRANDS JOBS/S", "RAW JOBS/S", "RATIO", "RAW BASELINE"],
        [
            (name, f"{m['per_second']:,.0f}", f"{b['per_second']:,.0f}", f"{x:.2f}x", label)
            for name, m, b, x, label in rows
        ],
        right=(1, 2, 3),
    )
    p, idle = r["pickup"], r["idle"]
    print(
        f"\npickup (enqueue returned in one process → handler started in an idle worker "
        f"process), {p['samples']} jobs: p50 {p['p50_ms']} ms, p95 {p['p95_ms']} ms, "
        f"p99 {p['p99_ms']} ms, max {p['max_ms']} ms"
    )
    print(f"idle worker CPU over {idle['seconds']:g} s: {idle['cpu_percent']}% of one core")


def run_bench(
    *,
    url: str | None,
    jobs: int,
    processes: int,
    concurrency: int,
    durability: str,
    latency_jobs: int,
    idle_seconds: float,
    directory: str | None,
    as_json: bool,
) -> int:
    from .cli import output

    result = measure(
        url=url,
        jobs=jobs,
        processes=processes,
        concurrency=concurrency,
        durability=durability,
        latency_jobs=latency_jobs,
        idle_seconds=idle_seconds,
        directory=directory,
    )
    if as_json:
        output.emit_json(result)
    else:
        report(result)
    return 0
