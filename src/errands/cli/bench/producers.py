"""The producer phases of ``errands bench``: N jobs enqueued one call per job, by one producer
and by many at once, with the latency of every call.

- ``enqueue``: one thread calling ``enqueue`` (the one-producer figure);
- ``enqueue_async``: one asyncio task awaiting ``enqueue_async``;
- ``enqueue_threads``: THREADS threads of one process calling ``enqueue``;
- ``enqueue_tasks``: TASKS asyncio tasks awaiting ``enqueue_async``.

Each producer's connection is opened before the clock starts (a first read), so the figures
are of enqueueing, not of connecting. Latency is per call, from the call to its return (the
job committed): p50 and p99 in milliseconds. The many-producer phases are compared with the
one-producer phase of the same kind measured in the same round (``producer_ratios``).
"""

from __future__ import annotations

import asyncio
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

from ...queue import Queue
from . import raw as bench_raw

THREADS = 8
TASKS = 64

# Each many-producer phase and the one-producer phase it is compared with, in run order
# after the raw insert of its round (phases.py: BASELINE).
ONE_PRODUCER = {"enqueue_threads": "enqueue", "enqueue_tasks": "enqueue_async"}
LABELS = {
    "enqueue": "enqueue one by one",
    "enqueue_async": "enqueue_async, 1 task",
    "enqueue_threads": f"enqueue, {THREADS} threads",
    "enqueue_tasks": f"enqueue_async, {TASKS} tasks",
}


def figures(n: int, seconds: float, latencies: list[float]) -> dict[str, Any]:
    ms = sorted(x * 1000 for x in latencies)
    return {**bench_raw.rate(n, seconds), "p50_ms": pct(ms, 0.50), "p99_ms": pct(ms, 0.99)}


def pct(sorted_ms: list[float], q: float) -> float | None:
    if not sorted_ms:
        return None
    return round(sorted_ms[min(len(sorted_ms) - 1, int(q * len(sorted_ms)))], 3)


def threads(url: str, n: int, durability: str, count: int = 1) -> dict[str, Any]:
    """``count`` threads share n jobs, each enqueueing its share one call at a time."""
    lats: list[list[float]] = [[] for _ in range(count)]
    ready = threading.Barrier(count + 1)
    with Queue(url, durability=durability) as q:

        def produce(k: int) -> None:
            q.get(1)  # this thread's connection, opened before the clock starts
            mine, clock = lats[k], time.perf_counter
            ready.wait()
            for i in range(k, n, count):
                t = clock()
                q.enqueue("noop", {"i": i})
                mine.append(clock() - t)

        workers = [threading.Thread(target=produce, args=(k,)) for k in range(count)]
        for w in workers:
            w.start()
        ready.wait()
        start = time.perf_counter()
        for w in workers:
            w.join()
        took = time.perf_counter() - start
    return figures(n, took, [x for mine in lats for x in mine])


def tasks(url: str, n: int, durability: str, count: int = 1) -> dict[str, Any]:
    """``count`` asyncio tasks share n jobs, each awaiting ``enqueue_async`` per job."""

    async def run() -> tuple[float, list[float]]:
        lats: list[list[float]] = [[] for _ in range(count)]
        async with Queue(url, durability=durability) as q:
            await q.enqueue_async("warm-up", {})  # the async pool / writer thread, started

            async def produce(k: int) -> None:
                mine, clock = lats[k], time.perf_counter
                for i in range(k, n, count):
                    t = clock()
                    await q.enqueue_async("noop", {"i": i})
                    mine.append(clock() - t)

            start = time.perf_counter()
            await asyncio.gather(*(produce(k) for k in range(count)))
            took = time.perf_counter() - start
        return took, [x for mine in lats for x in mine]

    took, lats = asyncio.run(run())
    return figures(n, took, lats)


def runners(
    fresh: Callable[[str], str], n: int, durability: str
) -> dict[str, Callable[[str], dict[str, Any]]]:
    return {
        "enqueue": lambda name: threads(fresh(name), n, durability),
        "enqueue_async": lambda name: tasks(fresh(name), n, durability),
        "enqueue_threads": lambda name: threads(fresh(name), n, durability, THREADS),
        "enqueue_tasks": lambda name: tasks(fresh(name), n, durability, TASKS),
    }


def producer_ratios(ours: dict[str, dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per many-producer phase: the median over rounds of its jobs/s over the one-producer
    phase's in the same round (``speedup``), and the same of their p99 latencies
    (``p99_ratio``)."""
    out: dict[str, dict[str, float]] = {}
    for many, one in ONE_PRODUCER.items():
        speed = zip(ours[many]["rounds"], ours[one]["rounds"], strict=True)
        p99 = zip(ours[many]["p99_rounds"], ours[one]["p99_rounds"], strict=True)
        out[many] = {
            "speedup": round(statistics.median(m / o for m, o in speed), 3),
            "p99_ratio": round(statistics.median(m / o for m, o in p99 if o), 3),
        }
    return out


def summary(ours: dict[str, dict[str, Any]], ratios: dict[str, dict[str, float]]) -> str:
    """The report's paragraph: each producer phase's latency, and many against one."""
    lat = "; ".join(
        f"{label}: p50 {ours[p]['p50_ms']} ms, p99 {ours[p]['p99_ms']} ms"
        for p, label in LABELS.items()
    )
    many = "; ".join(
        f"{LABELS[m]} / {LABELS[o]}: {ratios[m]['speedup']:.2f}x jobs/s, "
        f"{ratios[m]['p99_ratio']:.2f}x p99"
        for m, o in ONE_PRODUCER.items()
    )
    return (
        f"latency per call (best round) — {lat}. Many producers against one, median over "
        f"rounds of the same round's figures — {many}."
    )
