"""The app ``errands bench`` runs in real processes: its worker and its pickup producer.

    errands worker --app errands.cli.bench.app:q     # $ERRANDS_BENCH_DB, $ERRANDS_BENCH_DURABILITY
    python -m errands.cli.bench.app produce N GAP_MS # enqueue N jobs one at a time, print commits

The Queue is built from the environment because ``errands worker`` imports the app by name.
The handlers do nothing: the bench measures errands, not the work (``steps3`` records three
no-op steps, ``parked`` sleeps or waits for a day). Its start time is stored by
errands itself (``jobs.started_at`` is when the handler started), which is what pickup latency
is measured to.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time

from ...context import JobContext
from ...queue import Queue

DB_ENV = "ERRANDS_BENCH_DB"
DURABILITY_ENV = "ERRANDS_BENCH_DURABILITY"


def build() -> Queue:
    url = os.environ.get(DB_ENV)
    if not url:
        raise SystemExit(f"errands.cli.bench.app: set {DB_ENV} to the database to use")
    queue = Queue(url, durability=os.environ.get(DURABILITY_ENV, "full"))

    @queue.task
    def noop(i: int = 0) -> None:
        return None

    @queue.task
    def steps3(ctx: JobContext, i: int = 0) -> None:
        """Three recorded no-op steps: what a durable step costs beside a job's own cost."""
        for name in ("a", "b", "c"):
            ctx.step(name, _nothing)

    @queue.task
    def parked(ctx: JobContext, i: int = 0) -> None:
        """Parks for a day: asleep (odd i) or waiting for a signal nobody sends (even i)."""
        if i % 2:
            ctx.sleep(86400)
        else:
            ctx.wait_for("never")

    return queue


def _nothing() -> None:
    return None


q = build() if os.environ.get(DB_ENV) else None


def produce(n: int, gap_ms: float) -> None:
    """Enqueue ``n`` jobs one at a time, with random gaps so each finds the worker idle; print
    ``[[job_id, committed_at], …]`` (``time.time()`` right after ``enqueue`` returned)."""
    queue = build()
    rng = random.Random()
    committed: list[list[float]] = []
    try:
        for i in range(n):
            time.sleep(rng.uniform(0.5, 1.5) * gap_ms / 1000)
            job_id = queue.enqueue("noop", {"i": i})
            committed.append([job_id, time.time()])
    finally:
        queue.close()
    json.dump(committed, sys.stdout)


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] != "produce":
        raise SystemExit("usage: python -m errands.cli.bench.app produce N GAP_MS")
    produce(int(sys.argv[2]), float(sys.argv[3]))
