"""One peer, one workload; run inside that peer's own virtual environment.

    python bench/peers/workload.py PEER --jobs N --dir TMP [--pg URL] [--redis URL]

The workload is the same for everyone: N no-op jobs enqueued one at a time (each call returns
after the library has stored the job), then processed by the library's own worker started in
the way its documentation shows (a separate process where it has one; a loop over its
get/ack API where it is a plain queue), timed from the worker's start until the library
reports every job done. Worker start-up is inside that time for everyone. Then, into the same
store (its jobs now done), N more jobs enqueued one call per job by THREADS threads of this
process at once (``enqueue_threads``): the library's producer API used as a web application's
request threads would, a shared client where the library says it is thread-safe, one per
thread where it does not (each peer's function says which); with the p50 and p99 latency of
a call. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TIMEOUT = 120.0  # per worker phase; slower peers are measured on what they finished


def rate(n: int, seconds: float) -> float:
    return round(n / seconds, 1) if seconds > 0 else 0.0


PARTIAL: dict[str, int] = {}  # set when a worker ran out of time: how many it finished


def worker(cmd: list[str], env: dict[str, str], done: Callable[[], int], n: int) -> float:
    """Start the peer's worker process, wait until ``done()`` reaches n, stop it. A worker
    still busy after TIMEOUT is stopped and measured on what it finished."""
    start = time.perf_counter()
    log = open(os.environ.get("PEER_LOG", os.devnull), "ab")
    proc = subprocess.Popen(cmd, env=env, cwd=HERE, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = start + TIMEOUT
        while done() < n:
            if time.perf_counter() > deadline:
                PARTIAL["done"] = finished = done()
                return (time.perf_counter() - start) * n / max(finished, 1)
            if proc.poll() is not None and done() < n:
                raise RuntimeError(f"{cmd} exited with {proc.returncode} before finishing")
            time.sleep(0.01)
        return time.perf_counter() - start
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()


THREADS = 8


def threaded(
    n: int, make: Callable[[], Callable[[int], object]], count: int = THREADS
) -> dict[str, Any]:
    """``count`` threads share n enqueues; ``make()`` runs in each thread before the clock
    starts and returns that thread's enqueue-one-job function (its own client, or a call on a
    shared one). Returns jobs/s and per-call p50/p99 in ms."""
    import threading

    lats: list[list[float]] = [[] for _ in range(count)]
    ready = threading.Barrier(count + 1)
    errors: list[BaseException] = []

    def produce(k: int) -> None:
        try:
            put = make()
        except BaseException as exc:
            errors.append(exc)
            ready.abort()
            raise
        mine, clock = lats[k], time.perf_counter
        ready.wait()
        try:
            for i in range(k, n, count):
                t = clock()
                put(i)
                mine.append(clock() - t)
        except BaseException as exc:
            errors.append(exc)
            raise

    threads = [threading.Thread(target=produce, args=(k,)) for k in range(count)]
    for t in threads:
        t.start()
    try:
        ready.wait()
    except threading.BrokenBarrierError:
        pass
    start = time.perf_counter()
    for t in threads:
        t.join()
    took = time.perf_counter() - start
    if errors:
        raise RuntimeError(f"a producer thread failed: {errors[0]!r}")
    ms = sorted(x * 1000 for mine in lats for x in mine)
    return {
        "enqueue_threads": rate(n, took),
        "p50_ms": round(ms[len(ms) // 2], 3),
        "p99_ms": round(ms[min(len(ms) - 1, int(len(ms) * 0.99))], 3),
    }


def timed(fn: Callable[[], None]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


# -- the peers ------------------------------------------------------------------------------


def errands_(
    n: int, a: argparse.Namespace, env: dict[str, str], durability: str = "full"
) -> dict[str, Any]:
    import sqlite3

    import errands

    path = os.path.join(a.dir, "errands.db")
    env = {**env, "ERRANDS_BENCH_DB": path, "ERRANDS_BENCH_DURABILITY": durability}
    with errands.Queue(path, durability=durability) as q:
        enq = timed(lambda: [q.enqueue("noop", {"i": i}) for i in range(n)] and None)

    def done() -> int:
        conn = sqlite3.connect(path, timeout=30)
        try:
            return int(
                conn.execute("SELECT count(*) FROM jobs WHERE status = 'succeeded'").fetchone()[0]
            )
        finally:
            conn.close()

    cmd = [sys.executable, "-m", "errands", "worker", "--app", "errands.cli.bench.app:q", "--quiet"]
    proc = worker(cmd, env, done, n)
    with errands.Queue(path, durability=durability) as q:  # one Queue: thread-safe
        many = threaded(n, lambda: lambda i: q.enqueue("noop", {"i": i}))
    return {
        "enqueue": rate(n, enq),
        "process": rate(n, proc),
        **many,
        "how": "errands worker, 8 threads; producers share one Queue",
    }


def errands_pg(n: int, a: argparse.Namespace, env: dict[str, str]) -> dict[str, Any]:
    import psycopg

    import errands

    url = fresh_database(a.pg, "errands_peer_errands")
    env = {**env, "ERRANDS_BENCH_DB": url}
    with errands.Queue(url) as q:
        enq = timed(lambda: [q.enqueue("noop", {"i": i}) for i in range(n)] and None)

    def done() -> int:
        with psycopg.connect(url, autocommit=True) as conn:
            row = conn.execute("SELECT count(*) FROM jobs WHERE status = 'succeeded'").fetchone()
            return int(row[0]) if row else 0

    cmd = [sys.executable, "-m", "errands", "worker", "--app", "errands.cli.bench.app:q", "--quiet"]
    proc = worker(cmd, env, done, n)
    with errands.Queue(url) as q:  # one Queue: thread-safe, a pool of connections
        many = threaded(n, lambda: lambda i: q.enqueue("noop", {"i": i}))
    return {
        "enqueue": rate(n, enq),
        "process": rate(n, proc),
        **many,
        "how": "errands worker, 8 threads; producers share one Queue",
    }


def errands_normal(n: int, a: argparse.Namespace, env: dict[str, str]) -> dict[str, Any]:
    """synchronous=NORMAL, as litequeue uses: no fsync per commit (see README, durability)."""
    result = errands_(n, a, env, durability="normal")
    result["how"] += ", durability=normal"
    return result


def huey_(n: int, a: argparse.Namespace, env: dict[str, str]) -> dict[str, Any]:
    env = {**env, "PEER_DB": os.path.join(a.dir, "huey.db")}
    os.environ.update(env)
    import apps

    enq = timed(lambda: [apps.noop(i) for i in range(n)] and None)
    cmd = [os.path.join(os.path.dirname(sys.executable), "huey_consumer"), "apps.huey"]
    cmd += ["-w", "8", "-k", "thread"]
    proc = worker(cmd, env, apps.huey.result_count, n)
    # SqliteHuey keeps a connection per thread: the task is called from every thread.
    many = threaded(n, lambda: apps.noop)
    return {
        "enqueue": rate(n, enq),
        "process": rate(n, proc),
        **many,
        "how": "huey_consumer -w 8 -k thread; producers call the task",
    }


def litequeue_(n: int, a: argparse.Namespace, env: dict[str, str]) -> dict[str, Any]:
    from litequeue import LiteQueue

    q = LiteQueue(os.path.join(a.dir, "litequeue.db"))
    enq = timed(lambda: [q.put(json.dumps({"i": i})) for i in range(n)] and None)

    def drain() -> None:
        while (task := q.pop()) is not None:
            json.loads(task.data)
            q.done(task.message_id)

    proc = timed(drain)
    path = os.path.join(a.dir, "litequeue.db")

    def mine() -> Callable[[int], object]:
        own = LiteQueue(path)  # one per thread: a LiteQueue holds one sqlite3 connection
        return lambda i: own.put(json.dumps({"i": i}))

    many = threaded(n, mine)
    return {
        "enqueue": rate(n, enq),
        "process": rate(n, proc),
        **many,
        "how": "pop/done loop, 1 thread; a LiteQueue per producer thread",
    }


def persistqueue_(n: int, a: argparse.Namespace, env: dict[str, str]) -> dict[str, Any]:
    from persistqueue import SQLiteAckQueue

    q = SQLiteAckQueue(os.path.join(a.dir, "persist"), auto_commit=True)
    enq = timed(lambda: [q.put({"i": i}) for i in range(n)] and None)

    def drain() -> None:
        for _ in range(n):
            item = q.get(block=False)
            q.ack(item)

    proc = timed(drain)
    shared = SQLiteAckQueue(os.path.join(a.dir, "persist"), auto_commit=True, multithreading=True)
    many = threaded(n, lambda: lambda i: shared.put({"i": i}))
    return {
        "enqueue": rate(n, enq),
        "process": rate(n, proc),
        **many,
        "how": "get/ack loop, 1 thread; producers share one queue (multithreading=True)",
    }


def rq_(n: int, a: argparse.Namespace, env: dict[str, str]) -> dict[str, Any]:
    from redis import Redis
    from rq import Queue

    env = {**env, "PEER_NAME": "rq"}
    os.environ.update(env)
    import apps

    redis = Redis.from_url(a.redis)
    redis.flushdb()
    q = Queue("peers", connection=redis)
    enq = timed(lambda: [q.enqueue(apps.rq_noop, i) for i in range(n)] and None)
    cmd = [os.path.join(os.path.dirname(sys.executable), "rq"), "worker", "--burst", "--url"]
    cmd += [a.redis, "peers"] + (["-w", RQ_WORKER_CLASS] if RQ_WORKER_CLASS else [])
    proc = worker(cmd, env, lambda: q.finished_job_registry.count, n)
    many = threaded(n, lambda: lambda i: q.enqueue(apps.rq_noop, i))  # redis-py: thread-safe
    redis.flushdb()
    return {
        "enqueue": rate(n, enq),
        "process": rate(n, proc),
        **many,
        "how": "rq worker (forks per job); producers share one rq Queue",
    }


def rq_simple(n: int, a: argparse.Namespace, env: dict[str, str]) -> dict[str, Any]:
    global RQ_WORKER_CLASS
    RQ_WORKER_CLASS = "rq.worker.SimpleWorker"
    result = rq_(n, a, env)
    result["how"] = "rq worker -w SimpleWorker (no fork); producers share one rq Queue"
    return result


RQ_WORKER_CLASS = ""


def procrastinate_(n: int, a: argparse.Namespace, env: dict[str, str]) -> dict[str, Any]:
    import psycopg

    url = fresh_database(a.pg, "errands_peer_procrastinate")
    env = {**env, "PEER_PG": url, "PEER_NAME": "procrastinate"}
    os.environ.update(env)
    import asyncio

    import apps

    async def enqueue() -> float:
        async with apps.app.open_async():
            await apps.app.schema_manager.apply_schema_async()
            start = time.perf_counter()
            for i in range(n):
                await apps.proc_noop.defer_async(i=i)
            return time.perf_counter() - start

    enq = asyncio.run(enqueue())

    def done() -> int:
        with psycopg.connect(url, autocommit=True) as conn:
            row = conn.execute(
                "SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'"
            ).fetchone()
            return int(row[0]) if row else 0

    cmd = [os.path.join(os.path.dirname(sys.executable), "procrastinate"), "--app", "apps.app"]
    cmd += ["worker", "--concurrency", "8"]
    proc = worker(cmd, env, done, n)

    def mine() -> Callable[[int], object]:
        # procrastinate's producer API is asyncio: each thread runs its own loop with its
        # own copy of the app (a connector per thread), deferring one job per call.
        import procrastinate

        loop = asyncio.new_event_loop()
        own = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url))

        @own.task(name="noop")
        async def noop(i: int) -> None:  # the same task name the worker runs
            return None

        loop.run_until_complete(own.open_async())
        return lambda i: loop.run_until_complete(noop.defer_async(i=i))

    many = threaded(n, mine)
    return {
        "enqueue": rate(n, enq),
        "process": rate(n, proc),
        **many,
        "how": "procrastinate worker -c 8; producers: defer_async on a loop per thread",
    }


def pgqueuer_(n: int, a: argparse.Namespace, env: dict[str, str]) -> dict[str, Any]:
    import psycopg
    from pgqueuer.db import SyncPsycopgDriver
    from pgqueuer.queries import SyncQueries

    url = fresh_database(a.pg, "errands_peer_pgqueuer")
    env = {**env, "PEER_PG": url, "PEER_NAME": "pgqueuer", "PGDSN": url}
    bindir = os.path.dirname(sys.executable)
    subprocess.run([os.path.join(bindir, "pgq"), "install"], env=env, check=True, cwd=HERE)
    conn = psycopg.connect(url, autocommit=True)
    queries = SyncQueries(SyncPsycopgDriver(conn))
    enq = timed(
        lambda: [queries.enqueue("noop", json.dumps({"i": i}).encode()) for i in range(n)] and None
    )

    def done() -> int:
        with psycopg.connect(url, autocommit=True) as c:
            row = c.execute("SELECT count(*) FROM pgqueuer").fetchone()
            return n - (int(row[0]) if row else 0)

    cmd = [sys.executable, os.path.join(HERE, "apps.py")]  # = `pgq run apps:main`
    proc = worker(cmd, env, done, n)
    conn.close()

    def mine() -> Callable[[int], object]:
        own = SyncQueries(SyncPsycopgDriver(psycopg.connect(url, autocommit=True)))
        return lambda i: own.enqueue("noop", json.dumps({"i": i}).encode())

    many = threaded(n, mine)
    return {
        "enqueue": rate(n, enq),
        "process": rate(n, proc),
        **many,
        "how": "PgQueuer.run(), batch 10; a connection per producer thread",
    }


def fresh_database(base: str, name: str) -> str:
    import psycopg

    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    head, _, _ = base.rpartition("/")
    return f"{head}/{name}"


PEERS = {
    "errands": errands_,
    "errands-normal": errands_normal,
    "errands-pg": errands_pg,
    "huey": huey_,
    "litequeue": litequeue_,
    "persist-queue": persistqueue_,
    "rq": rq_,
    "rq-simple": rq_simple,
    "procrastinate": procrastinate_,
    "pgqueuer": pgqueuer_,
}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("peer", choices=sorted(PEERS))
    p.add_argument("--jobs", type=int, default=10000)
    p.add_argument("--dir", required=True)
    p.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/postgres")
    p.add_argument("--redis", default="redis://127.0.0.1:6379/13")
    a = p.parse_args()
    sys.path.insert(0, str(HERE))
    name = "rq" if a.peer == "rq-simple" else a.peer
    env = {**os.environ, "PEER_NAME": name, "PYTHONPATH": str(HERE)}
    os.environ["PEER_NAME"] = name
    result = PEERS[a.peer](a.jobs, a, env)
    if PARTIAL:
        result["how"] += f" (stopped after {TIMEOUT:.0f} s with {PARTIAL['done']} done)"
    print(json.dumps({"peer": a.peer, "jobs": a.jobs, **result}))


if __name__ == "__main__":
    main()
