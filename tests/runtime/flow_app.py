"""A worker process with limited tasks, for the flow-control runtime tests.

    python flow_app.py --db URL --ledger DIR [--concurrency N] [--lease S] [--poll S]

Every handler appends a line when it starts and one when it ends (job, attempt, seq, pid,
key, group, time) to this process's own ledger file, one ``write`` per line, so the parent
can measure how many of each limit's jobs ran at once — from the handlers' own records, not
from the database the claim reads — even after a SIGKILL.
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

API = errands.Limit("api", running=2)
TENANT = errands.Limit("tenant", running=1, group="tenant")
SMTP = errands.Limit("smtp", rate=(5, 1.0))
MIXED = errands.Limit("mixed", running=3, rate=(20, 1.0))
HOLD = errands.Limit("hold", running=1)
BURST = errands.Limit("burst", rate=(50, 1.0))


class Ledger:
    def __init__(self, directory: str) -> None:
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, f"{os.getpid()}.jsonl")
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._lock = threading.Lock()

    def record(self, ctx: JobContext, phase: str, key: str, group: str, seq: int) -> None:
        row = {
            "job": ctx.job_id,
            "attempt": ctx.attempt,
            "seq": seq,
            "pid": os.getpid(),
            "phase": phase,
            "key": key,
            "group": group,
            "t": time.time(),
        }
        with self._lock:
            os.write(self._fd, (json.dumps(row) + "\n").encode())


def build(url: str, ledger: Ledger, lease: float, poll: float) -> errands.Queue:
    q = errands.Queue(url, lease_seconds=lease, heartbeat_seconds=lease / 4, poll_interval=poll)

    def run(ctx: JobContext, key: str, group: str, seq: int, ms: float) -> None:
        ledger.record(ctx, "start", key, group, seq)
        time.sleep(ms / 1000)
        ledger.record(ctx, "end", key, group, seq)

    @q.task(limit=API)
    def api(ctx: JobContext, seq: int, ms: float = 20) -> None:
        run(ctx, "api", "", seq, ms)

    @q.task(limit=TENANT)
    def tenant(ctx: JobContext, seq: int, tenant: str, ms: float = 20) -> None:
        run(ctx, "tenant", tenant, seq, ms)

    @q.task(limit=SMTP)
    def smtp(ctx: JobContext, seq: int, ms: float = 1) -> None:
        run(ctx, "smtp", "", seq, ms)

    @q.task(limit=MIXED)
    def mixed(ctx: JobContext, seq: int, ms: float = 5) -> None:
        run(ctx, "mixed", "", seq, ms)

    @q.task(limit=HOLD)
    def hold(ctx: JobContext, seq: int, ms: float = 3000) -> None:
        run(ctx, "hold", "", seq, ms)

    @q.task(limit=BURST)
    def burst(ctx: JobContext, seq: int, ms: float = 1) -> None:
        run(ctx, "burst", "", seq, ms)

    @q.task
    def free(ctx: JobContext, seq: int, ms: float = 1) -> None:
        run(ctx, "free", "", seq, ms)

    return q


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--db", required=True)
    p.add_argument("--ledger", required=True)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--lease", type=float, default=5.0)
    p.add_argument("--poll", type=float, default=0.5)
    args = p.parse_args()
    q = build(args.db, Ledger(args.ledger), args.lease, args.poll)
    summary = Worker(q, concurrency=args.concurrency, max_prefetch=4).run()
    print(json.dumps({"claimed": summary.claimed}), flush=True)


if __name__ == "__main__":
    main()
