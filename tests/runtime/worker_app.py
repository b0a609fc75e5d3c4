"""A real worker (or producer) process for the runtime fault tests.

    python worker_app.py worker  --db URL --ledger DIR [--concurrency N] [--lease S] …
    python worker_app.py produce --db URL --count N [--type T]

Every handler appends one JSON line per step of each execution (job id, attempt, seq, pid,
phase, time) to this process's own ledger file with flush + fsync, so the parent can count
executions after a SIGKILL. ``worker`` prints a JSON summary line on stdout when it returns;
``produce`` prints ``OK <id>`` after each acknowledged enqueue and ``BUSY <message>`` when the
database stayed locked past the busy timeout.
"""

from __future__ import annotations

import argparse
import asyncio
import faulthandler
import json
import logging
import os
import random
import signal
import sqlite3
import sys
import threading
import time
from typing import Any

import errands
from errands.context import JobContext
from errands.worker.loop import Worker

KILL_EXIT = 87  # a handler that kills its own process exits with this status


class Ledger:
    """One append-only file per process; one write() per line so a SIGKILL cannot tear it."""

    def __init__(self, directory: str | None) -> None:
        self._fd = -1
        self._lock = threading.Lock()
        if directory:
            os.makedirs(directory, exist_ok=True)
            path = os.path.join(directory, f"{os.getpid()}.jsonl")
            self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        # A handler's fork may happen while another runner holds the lock.
        os.register_at_fork(after_in_child=self._reinit)

    def _reinit(self) -> None:
        self._lock = threading.Lock()

    def record(self, ctx: JobContext, seq: int, phase: str, **extra: Any) -> None:
        if self._fd < 0:
            return
        row = {
            "job": ctx.job_id,
            "attempt": ctx.attempt,
            "seq": seq,
            "pid": os.getpid(),
            "phase": phase,
            "t": time.time(),
            **extra,
        }
        line = (json.dumps(row) + "\n").encode()
        with self._lock:
            os.write(self._fd, line)
            os.fsync(self._fd)


def sqlite_path(url: str) -> str:
    return url[len("sqlite:///") :] if url.startswith("sqlite:///") else url


def app_connection(url: str, busy_timeout: float) -> tuple[Any, str]:
    """The application's own connection to the queue's database (a transaction opens on the
    first statement), and its INSERT into side_effects in that driver's placeholder style."""
    if url.startswith(("postgres://", "postgresql://")):
        import psycopg

        insert = "INSERT INTO side_effects (job_id, attempt, seq) VALUES (%s, %s, %s)"
        return psycopg.connect(url), insert
    insert = "INSERT INTO side_effects (job_id, attempt, seq) VALUES (?, ?, ?)"
    return sqlite3.connect(sqlite_path(url), timeout=busy_timeout), insert


def build(args: argparse.Namespace) -> errands.Queue:
    q = errands.Queue(
        args.db,
        lease_seconds=args.lease,
        heartbeat_seconds=args.heartbeat,
        poll_interval=args.poll,
        shutdown_timeout=args.shutdown_timeout,
        busy_timeout=args.busy_timeout,
    )
    ledger = Ledger(args.ledger)
    quick = errands.fixed(0.05)

    @q.task(backoff=quick)
    def ledger_job(ctx: JobContext, seq: int, ms: float = 0.0) -> int:
        """The chaos job: record the execution, then work for ``ms`` milliseconds."""
        ledger.record(ctx, seq, "start")
        time.sleep(ms / 1000)
        return seq

    @q.task(backoff=quick)
    def ledger_fail(ctx: JobContext, seq: int, ms: float = 0.0) -> int:
        """A chaos job that fails for good (an upstream whose dependents are cancelled)."""
        ledger.record(ctx, seq, "start")
        time.sleep(ms / 1000)
        raise errands.JobError("CHAOS:FAIL", "the upstream fails", retry=False)

    @q.task(backoff=quick)
    def slow_job(ctx: JobContext, seq: int, seconds: float, slow_attempts: int = 1) -> int:
        """Sleeps ``seconds`` on its first ``slow_attempts`` attempts, then is quick."""
        ledger.record(ctx, seq, "start")
        if ctx.attempt <= slow_attempts:
            time.sleep(seconds)
        ledger.record(ctx, seq, "end")
        return seq

    @q.task(backoff=quick, max_attempts=3)
    def zombie_job(ctx: JobContext, seq: int, sleep: float, fail: bool, gate: str = "") -> int:
        """Attempt 1 is the one the test freezes with SIGSTOP: after waking it renews its lease
        (recording whether that changed a row) and then succeeds or fails for good. With a
        ``gate`` file it also waits for the test to create it: wall-clock sleep runs on while
        the process is frozen, so without a gate the attempt could finish in any moment the
        test lets it run before the freeze holds."""
        ledger.record(ctx, seq, "start")
        if ctx.attempt > 1:
            return seq
        time.sleep(sleep)
        while gate and not os.path.exists(gate):
            time.sleep(0.005)
        ledger.record(ctx, seq, "heartbeat", ok=ctx.heartbeat())
        if fail:
            raise errands.JobError("ZOMBIE:FAIL", "the stale attempt fails", retry=False)
        return seq

    @q.task(backoff=quick, max_attempts=2, timeout=0.5)
    def sync_timeout_job(ctx: JobContext, seq: int, seconds: float, slow_attempts: int = 99) -> int:
        ledger.record(ctx, seq, "start")
        if ctx.attempt <= slow_attempts:
            time.sleep(seconds)
        ledger.record(ctx, seq, "end")
        return seq

    @q.task(backoff=quick, max_attempts=2, timeout=0.5)
    async def async_timeout_job(ctx: JobContext, seq: int, seconds: float) -> int:
        ledger.record(ctx, seq, "start")
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            ledger.record(ctx, seq, "cancelled")
            raise
        ledger.record(ctx, seq, "end")
        return seq

    @q.task(backoff=quick)
    def cancellable_job(ctx: JobContext, seq: int) -> str:
        ledger.record(ctx, seq, "start")
        deadline = time.monotonic() + 30
        while not ctx.cancelled and time.monotonic() < deadline:
            time.sleep(0.02)
        ledger.record(ctx, seq, "saw_cancel" if ctx.cancelled else "gave_up")
        return "stopped"

    @q.task(backoff=quick)
    async def cancellable_async_job(ctx: JobContext, seq: int) -> str:
        ledger.record(ctx, seq, "start")
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            ledger.record(ctx, seq, "cancelled")
            raise
        return "slept"

    @q.task(backoff=quick, max_attempts=3)
    def txn_job(ctx: JobContext, seq: int, crash_attempts: int = 0) -> None:
        """Writes a row of its own and completes the job in the same transaction; on its
        first ``crash_attempts`` attempts the process dies before COMMIT."""
        ledger.record(ctx, seq, "start")
        conn, insert = app_connection(args.db, args.busy_timeout)
        try:
            conn.execute(insert, (ctx.job_id, ctx.attempt, seq))
            ctx.complete(connection=conn, result={"seq": seq})
            if ctx.attempt <= crash_attempts:
                ledger.record(ctx, seq, "crash")
                os._exit(KILL_EXIT)
            conn.commit()
        finally:
            conn.close()
        ledger.record(ctx, seq, "committed")

    @q.task(backoff=quick, max_attempts=3)
    def killer_job(ctx: JobContext, seq: int) -> None:
        """Kills its worker process every time it runs."""
        ledger.record(ctx, seq, "start")
        os._exit(KILL_EXIT)

    @q.task(backoff=quick)
    def closer_job(ctx: JobContext, seq: int, how: str = "close") -> int:
        """Closes the Queue its own worker runs on (issue #20, item 1)."""
        ledger.record(ctx, seq, "start")
        if how == "with":
            with q:
                pass
        else:
            q.close()
        ledger.record(ctx, seq, "end")
        return seq

    @q.task(backoff=quick)
    async def async_closer_job(ctx: JobContext, seq: int) -> int:
        """``await q.aclose()`` on the worker's own event loop (item 1)."""
        ledger.record(ctx, seq, "start")
        await q.aclose()
        ledger.record(ctx, seq, "end")
        return seq

    @q.task(backoff=quick)
    def chdir_job(ctx: JobContext, seq: int, to: str) -> int:
        """Changes the process's working directory (item 2)."""
        ledger.record(ctx, seq, "start")
        os.chdir(to)
        return seq

    @q.task(backoff=quick)
    def fork_job(ctx: JobContext, seq: int) -> int:
        """Forks and returns in both processes (item 4)."""
        ledger.record(ctx, seq, "start")
        pid = os.fork()
        ledger.record(ctx, seq, "forked", child=pid == 0)
        return seq

    @q.task(backoff=quick, max_attempts=1000)
    def steps_job(ctx: JobContext, seq: int, steps: int = 5, ms: float = 30.0) -> list[int]:
        """Durable steps (docs/durable-steps.md): even steps write a side_effects row with
        connection= (exactly once), odd ones only the ledger (at least once)."""
        conn, insert = app_connection(args.db, args.busy_timeout)
        if not isinstance(conn, sqlite3.Connection):
            conn.autocommit = True  # idle between steps: ctx.step begins its own transaction
        done = []
        try:
            for i in range(steps):

                def work(i: int = i) -> int:
                    ledger.record(ctx, seq, "step", step=i)
                    time.sleep(ms / 1000)
                    if i % 2 == 0:
                        conn.execute(insert, (ctx.job_id, ctx.attempt, i))
                    return i

                done.append(ctx.step(f"s{i}", work, connection=conn if i % 2 == 0 else None))
        finally:
            conn.close()
        return done

    @q.task(backoff=quick, max_attempts=1000)
    def journey_job(ctx: JobContext, seq: int) -> Any:
        """The durable-steps chaos job: an exactly-once step, a sleep, a wait for signal
        "go", another exactly-once step."""
        conn, insert = app_connection(args.db, args.busy_timeout)

        def effect(n: int) -> int:
            conn.execute(insert, (ctx.job_id, ctx.attempt, n))
            return n

        try:
            ctx.step("s0", effect, 0, connection=conn)
            ctx.sleep(0.2)
            reply = ctx.wait_for("go")
            ctx.step("s1", effect, 1, connection=conn)
        finally:
            conn.close()
        return reply

    @q.task(backoff=quick)
    def waiter_job(ctx: JobContext, seq: int) -> Any:
        """Parks until another process sends it signal "go"."""
        ledger.record(ctx, seq, "start")
        reply = ctx.wait_for("go")
        ledger.record(ctx, seq, "got")
        return reply

    @q.task(backoff=quick)
    def sleeper_job(ctx: JobContext, seq: int, seconds: float) -> int:
        """Sleeps durably between two steps: the worker is free meanwhile."""
        ctx.step("before", ledger.record, ctx, seq, "before")
        ctx.sleep(seconds)
        ledger.record(ctx, seq, "after")
        return seq

    return q


def run_close_thread(args: argparse.Namespace) -> int:
    """The application's shutdown: the worker runs on a thread, the main thread closes the
    Queue while jobs run; prints whether the worker had stopped when close() returned."""
    q = build(args)
    result: dict[str, Any] = {}

    def work() -> None:
        worker = Worker(
            q, concurrency=args.concurrency, max_prefetch=args.max_prefetch, handle_signals=False
        )
        result["summary"] = worker.run()

    thread = threading.Thread(target=work, name="app-worker")
    thread.start()
    deadline = time.monotonic() + 30
    while not q.jobs(status="running", limit=1) and time.monotonic() < deadline:
        time.sleep(0.01)
    q.close()
    alive = thread.is_alive()
    thread.join(60)
    summary = result.get("summary")
    out = {
        "worker_alive_after_close": alive,
        "queue_closed": summary.queue_closed if summary else None,
        "released": summary.released if summary else None,
        "succeeded": summary.succeeded if summary else None,
    }
    print(json.dumps(out), flush=True)
    return 0


def run_worker(args: argparse.Namespace) -> int:
    with build(args) as q:
        worker = Worker(
            q,
            concurrency=args.concurrency,
            burst=args.burst,
            max_prefetch=args.max_prefetch,
            queues=args.queues.split(",") if args.queues else None,
        )
        summary = worker.run()
        out = {
            "worker_id": summary.worker_id,
            "claimed": summary.claimed,
            "succeeded": summary.succeeded,
            "failed": summary.failed,
            "retried": summary.retried,
            "cancelled": summary.cancelled,
            "released": summary.released,
            "refused": summary.refused,
            "rescued": summary.rescued,
            "interrupted": summary.interrupted,
            "queue_closed": summary.queue_closed,
        }
        print(json.dumps(out), flush=True)
    return 0


def run_producer(args: argparse.Namespace) -> int:
    until = time.monotonic() + args.seconds
    with errands.Queue(args.db, busy_timeout=args.busy_timeout) as q:
        seq = args.start
        while seq < args.start + args.count or time.monotonic() < until:
            try:
                job_id = q.enqueue(args.type, {"seq": seq, "ms": random.uniform(0, 5)})
            except errands.DatabaseBusyError as exc:
                print(f"BUSY {seq} {time.time()} {exc}", flush=True)
            else:
                print(f"OK {job_id} {seq}", flush=True)
            seq += 1
            if args.pause:
                time.sleep(args.pause)
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("role", choices=["worker", "produce", "close-thread"])
    parser.add_argument("--db", required=True)
    parser.add_argument("--ledger")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--max-prefetch", type=int, default=8)
    parser.add_argument("--queues")
    parser.add_argument("--lease", type=float, default=2.0)
    parser.add_argument("--heartbeat", type=float, default=0.5)
    parser.add_argument("--poll", type=float, default=0.5)
    parser.add_argument("--shutdown-timeout", type=float, default=30.0)
    parser.add_argument("--busy-timeout", type=float, default=5.0)
    parser.add_argument("--burst", action="store_true")
    parser.add_argument("--count", type=int, default=0)
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--type", default="ledger_job")
    parser.add_argument("--pause", type=float, default=0.0)
    parser.add_argument("--seconds", type=float, default=0.0, help="produce for this long")
    args = parser.parse_args(argv)
    faulthandler.register(signal.SIGUSR1)  # the tests ask a stuck worker for its stacks
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(levelname)s %(process)d %(name)s: %(message)s",
    )
    if args.role == "close-thread":
        return run_close_thread(args)
    return run_worker(args) if args.role == "worker" else run_producer(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
