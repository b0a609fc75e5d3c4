"""A worker process with an ordered task, for the order-per-key runtime test.

    python order_app.py --db URL --ledger DIR [--concurrency N]

The handler appends a line when it starts and one when it ends, failed or not (job, key,
attempt, phase,
pid, time) to this process's own ledger file, one ``write`` per line, so the parent checks
the order of starts from the handlers' own records. About a third of attempts fail (chosen
from the job and attempt, so the same in every run) and are retried after a short backoff.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import threading
import time

import errands
from errands.context import JobContext
from errands.worker import Worker

LEASE = 3.0  # short: a SIGKILLed worker's head is recovered within the test


class Ledger:
    def __init__(self, directory: str) -> None:
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, f"{os.getpid()}.jsonl")
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._lock = threading.Lock()

    def record(self, ctx: JobContext, key: str, phase: str) -> None:
        row = {
            "job": ctx.job_id,
            "key": key,
            "attempt": ctx.attempt,
            "phase": phase,
            "pid": os.getpid(),
            "t": time.time(),
        }
        with self._lock:
            os.write(self._fd, (json.dumps(row) + "\n").encode())


def build(url: str, ledger: Ledger | None = None) -> errands.Queue:
    q = errands.Queue(url, lease_seconds=LEASE, heartbeat_seconds=LEASE / 4, poll_interval=0.05)

    @q.task(order="key", max_attempts=6, backoff=lambda attempt: 0.05)
    def step(ctx: JobContext, key: str, seq: int) -> None:
        if ledger is not None:
            ledger.record(ctx, key, "start")
        try:
            time.sleep(0.002)
            if random.Random(f"{ctx.job_id}:{ctx.attempt}").random() < 0.3:
                raise RuntimeError("a transient failure")
        finally:
            if ledger is not None:
                ledger.record(ctx, key, "end")

    return q


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--db", required=True)
    p.add_argument("--ledger", required=True)
    p.add_argument("--concurrency", type=int, default=4)
    args = p.parse_args()
    q = build(args.db, Ledger(args.ledger))
    summary = Worker(q, concurrency=args.concurrency, max_prefetch=4).run()
    print(json.dumps({"claimed": summary.claimed}), flush=True)


if __name__ == "__main__":
    main()
