"""What ``errands bench --fairness`` and ``--limits`` share: variants of no-op jobs, each
drained by one in-process burst worker on a fresh database, alternated over rounds so each
pair of variants sees the same moment of a shared host."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence

from ...queue import Queue
from ...worker import Worker
from . import Databases, progress

# Declares a variant's tasks on the queue and enqueues its jobs (``variant`` names it).
Setup = Callable[[Queue, str], None]


def drain(
    url: str, jobs: int, concurrency: int, durability: str, variant: str, setup: Setup
) -> float:
    """jobs/s of the ``jobs`` no-ops ``setup`` enqueued, drained by one burst worker (jobs it
    holds back, e.g. on a saturated limit, are not counted)."""
    with Queue(url, durability=durability) as q:
        setup(q, variant)
        start = time.perf_counter()
        Worker(q, concurrency=concurrency, burst=True, handle_signals=False).run()
        elapsed = time.perf_counter() - start
        done = q.stats()["counts"]["succeeded"]
        if done != jobs:
            raise RuntimeError(f"{variant}: {done} of {jobs} jobs ran")
    return jobs / elapsed


def rounds_of(
    dbs: Databases,
    name: str,
    variants: Sequence[str],
    rounds: int,
    run: Callable[[str, str], float],
) -> dict[str, list[float]]:
    """Each variant's jobs/s per round, ``run(url, variant)`` on a fresh database each."""
    figures: dict[str, list[float]] = {v: [] for v in variants}
    for r in range(rounds):
        for variant in variants:
            per_s = run(dbs.fresh(f"{name}_{variant}_{r}"), variant)
            figures[variant].append(per_s)
            progress(f"{name} round {r + 1}/{rounds} {variant}: {per_s:,.0f} jobs/s")
    return figures


def median_paired(mine: list[float], base: list[float]) -> float:
    """The median over rounds of ``mine / base`` measured in the same round."""
    return statistics.median(m / b for m, b in zip(mine, base, strict=True))
