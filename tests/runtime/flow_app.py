"""A worker process with limited, fair and ordered tasks, for the flow-control runtime tests
(test_flow_runtime.py, test_fair_runtime.py, test_order_runtime.py, test_flow_chaos.py).

    python flow_app.py --db URL --ledger DIR [--concurrency N] [--lease S] [--poll S]

Every handler appends a line when it starts and one when it ends, failed or not (job,
attempt, type, pid, phase, time, and the labels it was given: key and group for the limited
tasks, tenant, key or account for the fair and ordered ones, seq) to this process's own
ledger file, one ``write`` per line, so the parent measures what ran at once and in which
order from the handlers' own records — not from the database the claim reads — even after
a SIGKILL. A job whose payload has ``fail`` fails that share of its attempts (chosen from
the job and attempt, so the same in every run) and is retried after a short backoff.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import threading
import time
from typing import Any

import errands
from errands.context import JobContext
from errands.worker import Worker

API = errands.Limit("api", running=2)
TENANT = errands.Limit("tenant", running=1, group="tenant")
SMTP = errands.Limit("smtp", rate=(5, 1.0))
MIXED = errands.Limit("mixed", running=3, rate=(20, 1.0))
HOLD = errands.Limit("hold", running=1)
BURST = errands.Limit("burst", rate=(50, 1.0))
FAIR = errands.Fair("tenant", weights={"gold": 3})
PER_TENANT = errands.Limit("per-tenant", running=2, group="tenant")
PER_ACCOUNT = errands.Limit("per-account", running=1, group="account")


def quick(attempt: int) -> float:
    """The retries' backoff: short, so a failed job is retried within the test."""
    return 0.05


class Ledger:
    def __init__(self, directory: str) -> None:
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, f"{os.getpid()}.jsonl")
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._lock = threading.Lock()

    def record(self, ctx: JobContext, phase: str, **labels: Any) -> None:
        row = {
            "job": ctx.job_id,
            "attempt": ctx.attempt,
            "type": ctx.type,
            "pid": os.getpid(),
            "phase": phase,
            **labels,
            "t": time.time(),
        }
        with self._lock:
            os.write(self._fd, (json.dumps(row) + "\n").encode())


def build(
    url: str, ledger: Ledger | None = None, lease: float = 5.0, poll: float = 0.5
) -> errands.Queue:
    q = errands.Queue(url, lease_seconds=lease, heartbeat_seconds=lease / 4, poll_interval=poll)

    def run(ctx: JobContext, ms: float, fail: float = 0.0, **labels: Any) -> None:
        if ledger is not None:
            ledger.record(ctx, "start", **labels)
        try:
            time.sleep(ms / 1000)
            if fail and random.Random(f"{ctx.job_id}:{ctx.attempt}").random() < fail:
                raise RuntimeError("a transient failure")
        finally:
            if ledger is not None:
                ledger.record(ctx, "end", **labels)

    # Limits (test_flow_runtime.py): the ledger's key is the limit's, group the tenant.

    @q.task(limit=API)
    def api(ctx: JobContext, seq: int, ms: float = 20) -> None:
        run(ctx, ms, key="api", group="", seq=seq)

    @q.task(limit=TENANT)
    def tenant(ctx: JobContext, seq: int, tenant: str, ms: float = 20) -> None:
        run(ctx, ms, key="tenant", group=tenant, seq=seq)

    @q.task(limit=SMTP)
    def smtp(ctx: JobContext, seq: int, ms: float = 1) -> None:
        run(ctx, ms, key="smtp", group="", seq=seq)

    @q.task(limit=MIXED)
    def mixed(ctx: JobContext, seq: int, ms: float = 5) -> None:
        run(ctx, ms, key="mixed", group="", seq=seq)

    @q.task(limit=HOLD)
    def hold(ctx: JobContext, seq: int, ms: float = 3000) -> None:
        run(ctx, ms, key="hold", group="", seq=seq)

    @q.task(limit=BURST)
    def burst(ctx: JobContext, seq: int, ms: float = 1) -> None:
        run(ctx, ms, key="burst", group="", seq=seq)

    @q.task
    def free(ctx: JobContext, seq: int, ms: float = 1) -> None:
        run(ctx, ms, key="free", group="", seq=seq)

    # Fair share (test_fair_runtime.py), capped per tenant too.

    @q.task(fair=FAIR)
    def share(ctx: JobContext, tenant: str, seq: int, ms: float = 2) -> None:
        run(ctx, ms, tenant=tenant, seq=seq)

    @q.task(fair="tenant", limit=PER_TENANT, max_attempts=6, backoff=quick)
    def capped(ctx: JobContext, tenant: str, seq: int, ms: float = 20, fail: float = 0) -> None:
        run(ctx, ms, fail, tenant=tenant, seq=seq)

    # Order per key (test_order_runtime.py); and all three at once: fair across accounts,
    # each account's jobs in order, one running per account (test_flow_chaos.py).

    @q.task(order="key", max_attempts=6, backoff=quick)
    def step(ctx: JobContext, key: str, seq: int, ms: float = 2, fail: float = 0.3) -> None:
        run(ctx, ms, fail, key=key, seq=seq)

    @q.task(fair="account", order="account", limit=PER_ACCOUNT, max_attempts=6, backoff=quick)
    def post(ctx: JobContext, account: str, seq: int, ms: float = 5, fail: float = 0) -> None:
        run(ctx, ms, fail, account=account, seq=seq)

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
