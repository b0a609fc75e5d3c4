#!/usr/bin/env python3
"""Where errands' SQLite time goes, layer by layer: each errands figure of ``errands bench``
between its raw baseline and errands itself, with the layers in between measured in the
same rounds (paired, interleaved: the host is noisy, so each round runs every layer of a
phase back to back, and the ratios are medians over rounds of ratios within a round).

    .venv/bin/python scripts/bench_floor.py [--jobs 3000] [--rounds 5] [--durability full]

Phases and layers (each a ratio to the raw baseline of the same round):

- ``enqueue``: the raw insert (``bench_raw.sqlite_insert``: one narrow row per transaction);
  errands' own transaction for one job — BEGIN IMMEDIATE, its ``insert_job`` and
  ``insert_event`` named queries with the parameters errands binds, COMMIT — run by bare
  sqlite3 on an errands schema, with no errands Python at all; the same without the
  ENQUEUED event; and ``Queue.enqueue``.
- ``enqueue_many``: the raw bulk insert (``executemany`` of narrow rows); errands'
  ``insert_jobs_alike`` and ``insert_enqueued_events`` statements given ready-made JSON (no
  checks, no encoding; the jobs differ only in payload, as the workload's do); and
  ``Queue.enqueue_many``.
- ``process``: the raw processing baseline; errands' backend verbs driven in one thread
  (``claim``, then ``finish_and_claim`` of each batch's successes with the next claim, the
  worker's batches of 500 — errands' SQL and the backend's Python, no worker runtime);
  an in-process ``run_worker`` (threads, executor, recorder).

A layer's ratio is the most errands could reach by removing everything above it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import errands
from errands.backends.base import ClaimRequest, NewJob, Succeeded
from errands.backends.job_rows import insert_params
from errands.cli.bench import raw as bench_raw

BATCH = 500  # the worker's typical outcome batch with max_prefetch 1000 (BENCHMARKS.md)


class Template:
    """An empty errands database, migrated once and copied for each run, and the named
    queries its backend uses."""

    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, "template.db")
        with errands.Queue(self.path) as q:
            self.q: dict[str, str] = dict(q.backend.q)  # type: ignore[attr-defined]

    def copy(self, directory: str, durability: str) -> sqlite3.Connection:
        path = os.path.join(directory, f"copy-{time.monotonic_ns()}.db")
        shutil.copy(self.path, path)
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(f"PRAGMA synchronous = {'FULL' if durability == 'full' else 'NORMAL'}")
        conn.execute("PRAGMA foreign_keys = ON")  # as errands' own connections
        return conn


def statements_enqueue(t: Template, d: str, n: int, durability: str, event: bool) -> float:
    conn = t.copy(d, durability)
    insert, record = t.q["insert_job"], t.q["insert_event"]
    start = time.perf_counter()
    for i in range(n):
        now = time.time()
        conn.execute("BEGIN IMMEDIATE")
        # The parameters errands' own insert binds (one definition: backends/job_rows.py).
        job = NewJob("noop", f'{{"i":{i}}}', "default", 0, now, 20)
        params = insert_params(job, now, "queued")
        (job_id,) = conn.execute(insert, params).fetchone()
        if event:
            row = {"job_id": job_id, "ts": now, "event": "ENQUEUED", "actor": "api", "detail": None}
            conn.execute(record, row)
        conn.execute("COMMIT")
    took = time.perf_counter() - start
    conn.close()
    return n / took


def statements_enqueue_many(t: Template, d: str, n: int, durability: str) -> float:
    conn = t.copy(d, durability)
    now = time.time()
    # Jobs that differ only in payload: errands binds their shared fields once per run.
    payloads = json.dumps([f'{{"i":{i}}}' for i in range(n)])
    params = {
        "payloads": payloads,
        "queue": "default",
        "type": "noop",
        "priority": 0,
        "max_attempts": 20,
        "run_at": now,
        "limit_key": None,
        "limit_group": None,
        "to_state": "queued",
        "now": now,
    }
    start = time.perf_counter()
    conn.execute("BEGIN IMMEDIATE")
    rows = conn.execute(t.q["insert_jobs_alike"], params)
    ids = json.dumps(sorted(r[0] for r in rows.fetchall()))
    params = {"job_ids": ids, "now": now, "event": "ENQUEUED", "actor": "api"}
    conn.execute(t.q["insert_enqueued_events"], params)
    conn.execute("COMMIT")
    took = time.perf_counter() - start
    conn.close()
    return n / took


def queue_enqueue(d: str, n: int, durability: str, many: bool) -> float:
    with errands.Queue(os.path.join(d, f"q-{time.monotonic_ns()}.db"), durability=durability) as q:
        items = [("noop", {"i": i}) for i in range(n)]
        start = time.perf_counter()
        if many:
            q.enqueue_many(items)
        else:
            for kind, payload in items:
                q.enqueue(kind, payload)
        return n / (time.perf_counter() - start)


def backend_verbs(d: str, n: int, durability: str) -> float:
    with errands.Queue(os.path.join(d, f"v-{time.monotonic_ns()}.db"), durability=durability) as q:
        q.enqueue_many([("noop", {"i": i}) for i in range(n)])
        backend = q.backend
        request = ClaimRequest("floor", ["noop"], None, BATCH, 60.0)
        start = time.perf_counter()
        held = backend.claim(request, time.time())
        done = 0
        while held:
            now = time.time()
            for job in held:
                json.loads(job.payload)  # the least a handler call needs, as the raw baseline
            outcomes = [Succeeded(job.id, job.attempt, now, None) for job in held]
            applied, held = backend.finish_and_claim(outcomes, "floor", request, now, held)
            done += sum(applied)
        took = time.perf_counter() - start
    if done != n:
        raise RuntimeError(f"the backend verbs finished {done} of {n} jobs")
    return n / took


def worker_in_process(d: str, n: int, durability: str) -> float:
    with errands.Queue(os.path.join(d, f"w-{time.monotonic_ns()}.db"), durability=durability) as q:

        @q.task
        def noop(i: int = 0) -> None:
            return None

        q.enqueue_many([("noop", {"i": i}) for i in range(n)])
        start = time.perf_counter()
        summary = q.run_worker(burst=True, handle_signals=False)
        took = time.perf_counter() - start
    if summary.succeeded != n:
        raise RuntimeError(f"the worker finished {summary.succeeded} of {n} jobs")
    return n / took


Layers = list[tuple[str, Callable[[], float]]]


def phases(t: Template, d: str, n: int, durability: str) -> dict[str, Layers]:
    raw = os.path.join(d, "raw")

    def fresh_raw() -> str:
        return f"{raw}-{time.monotonic_ns()}.db"

    return {
        "enqueue": [
            (
                "raw insert",
                lambda: bench_raw.sqlite_insert(fresh_raw(), n, durability)["per_second"],
            ),
            ("errands' statements", lambda: statements_enqueue(t, d, n, durability, True)),
            ("… without the event", lambda: statements_enqueue(t, d, n, durability, False)),
            ("Queue.enqueue", lambda: queue_enqueue(d, n, durability, many=False)),
        ],
        "enqueue_many": [
            (
                "raw bulk insert",
                lambda: bench_raw.sqlite_bulk_insert(fresh_raw(), n * 10, durability)["per_second"],
            ),
            ("errands' statements", lambda: statements_enqueue_many(t, d, n * 10, durability)),
            ("Queue.enqueue_many", lambda: queue_enqueue(d, n * 10, durability, many=True)),
        ],
        "process": [
            (
                "raw processing",
                lambda: bench_raw.sqlite_process(fresh_raw(), n * 10, durability)["per_second"],
            ),
            (f"backend verbs, batches of {BATCH}", lambda: backend_verbs(d, n * 10, durability)),
            ("run_worker in process", lambda: worker_in_process(d, n * 10, durability)),
        ],
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=3000, help="one-by-one jobs; x10 for the rest")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--durability", choices=("full", "normal"), default="full")
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    result: dict[str, Any] = {"jobs": a.jobs, "rounds": a.rounds, "durability": a.durability}
    with tempfile.TemporaryDirectory(prefix="errands-floor-") as d:
        t = Template(d)
        for phase, layers in phases(t, d, a.jobs, a.durability).items():
            samples: dict[str, list[float]] = {name: [] for name, _ in layers}
            for r in range(a.rounds):
                print(f"{phase}, round {r + 1}/{a.rounds} …", file=sys.stderr, flush=True)
                for name, run in layers:
                    samples[name].append(run())
            base = samples[layers[0][0]]
            result[phase] = {
                name: {
                    "per_second": [round(x) for x in values],
                    "ratio": round(
                        statistics.median(v / b for v, b in zip(values, base, strict=True)), 3
                    ),
                }
                for name, values in samples.items()
            }
    if a.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{a.rounds} paired rounds, durability={a.durability}; ratio: median over rounds")
    for phase in ("enqueue", "enqueue_many", "process"):
        print(f"\n{phase}")
        for name, figures in result[phase].items():
            rates = figures["per_second"]
            print(
                f"  {name:34s} {statistics.median(rates):>9,.0f}/s "
                f"({min(rates):,} to {max(rates):,})  {figures['ratio']:.2f}x"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
