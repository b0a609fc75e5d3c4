"""A worker process with a fair task, for the fair-share runtime tests.

    python fair_app.py --db URL --ledger DIR [--concurrency N]

Every handler appends a line when it ends (job, tenant, phase, pid, time), ``capped`` one
when it starts too, to this process's own
ledger file, one ``write`` per line, so the parent measures the order of service from the
handlers' own records.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time

import errands
from errands.context import JobContext
from errands.worker import Worker

FAIR = errands.Fair("tenant", weights={"gold": 3})
PER_TENANT = errands.Limit("per-tenant", running=2, group="tenant")


class Ledger:
    def __init__(self, directory: str) -> None:
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, f"{os.getpid()}.jsonl")
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._lock = threading.Lock()

    def record(self, ctx: JobContext, tenant: str, phase: str = "end") -> None:
        row = {
            "job": ctx.job_id,
            "tenant": tenant,
            "phase": phase,
            "pid": os.getpid(),
            "t": time.time(),
        }
        with self._lock:
            os.write(self._fd, (json.dumps(row) + "\n").encode())


def build(url: str, ledger: Ledger | None = None) -> errands.Queue:
    q = errands.Queue(url, poll_interval=0.2)

    @q.task(fair=FAIR)
    def share(ctx: JobContext, tenant: str, seq: int, ms: float = 2) -> None:
        time.sleep(ms / 1000)
        if ledger is not None:
            ledger.record(ctx, tenant)

    @q.task(fair="tenant", limit=PER_TENANT)
    def capped(ctx: JobContext, tenant: str, seq: int, ms: float = 20) -> None:
        if ledger is not None:
            ledger.record(ctx, tenant, "start")
        time.sleep(ms / 1000)
        if ledger is not None:
            ledger.record(ctx, tenant, "end")

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
