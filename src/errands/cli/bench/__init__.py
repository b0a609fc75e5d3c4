"""``errands bench``: errands against the bare database, on this machine, in one run.

Every phase gets a fresh database — a new SQLite file in a temporary directory, or a new
schema in the PostgreSQL database of ``--db`` (dropped afterwards) — with the durability
errands uses, so the ratios compare like with like:

- raw baselines (``bench_raw``): single-row inserts (bare, and with the ENQUEUED audit row
  errands writes: ``ratios_audited``), one bulk insert, batched processing with
  the audit rows errands writes by default, by one process and by P processes;
- ``enqueue`` one by one (each committed when it returns) by one producer and by many at once
  (``producers.py``: 1 thread, 1 asyncio task, 8 threads, 64 tasks; jobs/s and the p50/p99
  latency of a call), and ``enqueue_many`` (one call);
- processing N no-op jobs by 1 and by P real ``errands worker`` processes (started first and
  idle; then the jobs are enqueued in one call and timed until the last one finishes);
- pickup latency: a separate producer process enqueues jobs one at a time with gaps; the time
  from ``enqueue`` returning to the handler starting in an idle worker process (p50/p95/p99);
- that idle worker's CPU over ``--idle-seconds``.

The throughput phases run in ``--rounds`` rounds, and inside a round each errands phase runs
right after its own raw baseline: (raw insert → enqueue one by one), (raw bulk insert →
enqueue_many), (raw processing → processing by 1), (raw processing by P processes →
processing by P): like with like, so no ratio mixes one process with P. A shared host is noisy —
the same raw baseline swings by a third or more between runs seconds apart — so a ratio of two
figures taken at different moments measures the host as much as errands. Each pair sees the
same moment of the host, and the headline ``ratios`` are the median over rounds of the
per-round paired ratios (``ratios_best``, best errands over best raw, beside them). The other
ratio, ``scaling``, is P processes over 1, the same way, for errands and for raw. Each
phase's ``seconds`` and ``per_second`` are its best round's; ``rounds`` lists every round's
jobs/s in order. Pickup latency and idle CPU run once, after the rounds. Progress goes to
stderr.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

from ... import __version__
from ...backends.sqlite import filesystem_type
from ...queue import ENV_DB, Queue
from . import producers
from . import raw as bench_raw
from .app import DB_ENV, DURABILITY_ENV
from .phases import BASELINE, RAW_LABELS
from .reporting import report

STARTUP_TIMEOUT = 60.0  # seconds for worker processes to register
DRAIN_TIMEOUT = 600.0  # seconds for the workers to finish every job
PICKUP_GAP_MS = 25.0  # mean gap between the producer's enqueues (each finds the worker idle)

# One phase of a round: given a name for its fresh database, the figures it measured.
Runner = Callable[[str], dict[str, Any]]
Figures = dict[str, dict[str, Any]]  # phase -> its figures, for one round


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


def enqueue_bulk(url: str, n: int, durability: str) -> dict[str, float]:
    items = [("noop", {"i": i}) for i in range(n)]
    with Queue(url, durability=durability) as q:
        start = time.perf_counter()
        q.enqueue_many(items)
        return bench_raw.rate(n, time.perf_counter() - start)


# -- errands worker processes ---------------------------------------------------------------


def _env(url: str, durability: str) -> dict[str, str]:
    """The bench's processes' environment: its own database, never the user's $ERRANDS_DB
    (which the worker would check against the bench app's Queue and refuse)."""
    env = {k: v for k, v in os.environ.items() if k != ENV_DB}
    return {**env, DB_ENV: url, DURABILITY_ENV: durability}


@contextlib.contextmanager
def worker_processes(
    dbs: Databases, url: str, durability: str, processes: int, concurrency: int
) -> Iterator[subprocess.Popen[bytes]]:
    """``errands worker`` (under its supervisor when P > 1), started and registered."""
    env = _env(url, durability)
    cmd = [sys.executable, "-m", "errands", "worker", "--app", "errands.cli.bench.app:q"]
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
    if done < n:  # a partial run's jobs/s would be a figure for less work: refuse it
        raise RuntimeError(f"{name}: only {done} of {n} jobs succeeded within {DRAIN_TIMEOUT:g} s")
    took = (last or start) - start
    return {**bench_raw.rate(n, took), "completed": done}


def pickup_and_idle(
    dbs: Databases, samples: int, durability: str, concurrency: int, idle_seconds: float
) -> tuple[dict[str, Any], dict[str, Any]]:
    url = dbs.fresh("pickup")
    Queue(url, durability=durability).close()
    env = _env(url, durability)
    with worker_processes(dbs, url, durability, 1, concurrency) as worker:
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "errands.cli.bench.app",
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


def _timed(label: str, run: Runner, name: str) -> dict[str, Any]:
    progress(f"{label} …")
    result = run(name)
    progress(f"{label}: {result['per_second']:,.0f} jobs/s")
    return result


def raw_runners(dbs: Databases, n: int, durability: str, processes: int) -> dict[str, Runner]:
    if dbs.postgres:
        return {
            "insert_audited": lambda name: bench_raw.postgres_insert(
                dbs.fresh(name), n, audited=True
            ),
            "insert": lambda name: bench_raw.postgres_insert(dbs.fresh(name), n),
            "bulk_insert": lambda name: bench_raw.postgres_bulk_insert(dbs.fresh(name), n),
            "process": lambda name: bench_raw.postgres_process(dbs.fresh(name), n),
            "process_p": lambda name: bench_raw.postgres_process_parallel(
                dbs.fresh(name), n, processes
            ),
        }
    return {
        "insert_audited": lambda name: bench_raw.sqlite_insert(
            dbs.fresh(name), n, durability, audited=True
        ),
        "insert": lambda name: bench_raw.sqlite_insert(dbs.fresh(name), n, durability),
        "bulk_insert": lambda name: bench_raw.sqlite_bulk_insert(dbs.fresh(name), n, durability),
        "process": lambda name: bench_raw.sqlite_process(dbs.fresh(name), n, durability),
        "process_p": lambda name: bench_raw.sqlite_process_parallel(
            dbs.fresh(name), n, durability, processes
        ),
    }


def errands_runners(
    dbs: Databases, n: int, durability: str, processes: int, concurrency: int
) -> dict[str, Runner]:
    return {
        **producers.runners(dbs.fresh, n, durability),
        "enqueue_many": lambda name: enqueue_bulk(dbs.fresh(name), n, durability),
        "process_1": lambda name: process(dbs, name, n, durability, 1, concurrency),
        "process_p": lambda name: process(dbs, name, n, durability, processes, concurrency),
    }


def errands_labels(processes: int) -> dict[str, str]:
    return {
        **producers.LABELS,
        "enqueue_many": "enqueue_many",
        "process_1": "processing, 1 worker process",
        "process_p": f"processing, {processes} worker processes",
    }


def one_round(
    index: int, rounds: int, raw: dict[str, Runner], ours: dict[str, Runner], processes: int
) -> tuple[Figures, Figures]:
    """Each raw baseline, then at once the errands phases compared with it."""
    tag = f"round {index}/{rounds}:"
    labels = errands_labels(processes)
    raw_figures: Figures = {}
    our_figures: Figures = {}
    for base, run_raw in raw.items():
        # The round in every database name: Databases.fresh must never be handed one twice.
        label = RAW_LABELS[base].replace("P processes", f"{processes} processes")
        raw_figures[base] = _timed(f"{tag} {label}", run_raw, f"raw_{base}_r{index}")
        for phase in (p for p, b in BASELINE.items() if b == base):
            our_figures[phase] = _timed(f"{tag} {labels[phase]}", ours[phase], f"{phase}_r{index}")
    return raw_figures, our_figures


def best_of(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """The fastest round's figures, with every round's jobs/s in run order."""
    best = max(samples, key=lambda s: float(s["per_second"]))
    out = {**best, "rounds": [s["per_second"] for s in samples]}
    if "p99_ms" in best:  # a producer phase: its p99 per round too, for producer_ratios
        out["p99_rounds"] = [s["p99_ms"] for s in samples]
    return out


def paired_ratio(mine: list[float], base: list[float]) -> float:
    """The median over rounds of errands / raw measured in the same round."""
    return round(statistics.median(m / b for m, b in zip(mine, base, strict=True)), 3)


def ratios(raw: Figures, ours: Figures) -> tuple[dict[str, float], dict[str, float]]:
    """The median of the paired ratios (the headline), and best errands / best raw."""
    paired = {p: paired_ratio(ours[p]["rounds"], raw[b]["rounds"]) for p, b in BASELINE.items()}
    best = {
        p: round(float(ours[p]["per_second"]) / float(raw[b]["per_second"]), 3)
        for p, b in BASELINE.items()
    }
    return paired, best


def scaling(raw: Figures, ours: Figures) -> dict[str, float]:
    """P processes over 1, for errands and for raw: the median of the rounds' paired ratios."""
    return {
        "errands": paired_ratio(ours["process_p"]["rounds"], ours["process_1"]["rounds"]),
        "raw": paired_ratio(raw["process_p"]["rounds"], raw["process"]["rounds"]),
    }


def measure(
    *,
    url: str | None,
    jobs: int,
    rounds: int,
    processes: int,
    concurrency: int,
    durability: str,
    latency_jobs: int,
    idle_seconds: float,
    directory: str | None,
) -> dict[str, Any]:
    dbs = Databases(url, directory)
    try:
        raw_run = raw_runners(dbs, jobs, durability, processes)
        our_run = errands_runners(dbs, jobs, durability, processes, concurrency)
        samples = [one_round(i, rounds, raw_run, our_run, processes) for i in range(1, rounds + 1)]
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
    raw = {base: best_of([r[base] for r, _ in samples]) for base in RAW_LABELS}
    ours = {phase: best_of([o[phase] for _, o in samples]) for phase in BASELINE}
    paired, best = ratios(raw, ours)
    return {
        "backend": "postgres" if dbs.postgres else "sqlite",
        "jobs": jobs,
        "rounds": rounds,
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
        "ratios": paired,
        "ratios_best": best,
        # enqueue one by one over the raw insert that also writes the audit row errands
        # promises (run in the same round, just before the raw insert): errands' own cost.
        "ratios_audited": {
            "enqueue": paired_ratio(ours["enqueue"]["rounds"], raw["insert_audited"]["rounds"])
        },
        "producers": producers.producer_ratios(ours),
        "scaling": scaling(raw, ours),
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


def run_bench(
    *,
    url: str | None,
    jobs: int,
    rounds: int,
    processes: int,
    concurrency: int,
    durability: str,
    latency_jobs: int,
    idle_seconds: float,
    directory: str | None,
    as_json: bool,
) -> int:
    from .. import output

    result = measure(
        url=url,
        jobs=jobs,
        rounds=rounds,
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
