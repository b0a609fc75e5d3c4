"""``errands bench --fairness``: what fair share costs the claim (issue #34).

Two runs of the same no-op jobs through one in-process worker (burst, ``--concurrency``
threads), each on a fresh database, alternated over ``--rounds``:

* ``plain``: a task without ``fair`` (the plain claim);
* ``fair``: the same jobs of a task with ``fair="tenant"``, spread over 1,000 tenants, every
  one due (the limited claim: the groups' scan, the stored turns, a probe per value served).

``fair / plain`` is the figure the issue asks >= 0.8 of.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from ...queue import Queue
from ...worker import Worker
from . import Databases, progress

VALUES = 1000


def _run(url: str, jobs: int, concurrency: int, variant: str, durability: str) -> float:
    """jobs/s of ``jobs`` no-ops drained by one burst worker."""
    with Queue(url, durability=durability) as q:
        if variant == "plain":

            @q.task(name="work")
            def plain(tenant: str) -> None:
                pass

        else:

            @q.task(name="work", fair="tenant")
            def fair(tenant: str) -> None:
                pass

        q.enqueue_many([("work", {"tenant": f"t{i % VALUES}"}) for i in range(jobs)])
        start = time.perf_counter()
        Worker(q, concurrency=concurrency, burst=True, handle_signals=False).run()
        elapsed = time.perf_counter() - start
        done = q.stats()["counts"]["succeeded"]
        if done != jobs:
            raise RuntimeError(f"{variant}: {done} of {jobs} jobs ran")
    return jobs / elapsed


def measure_fairness(
    *,
    url: str | None,
    jobs: int,
    rounds: int,
    concurrency: int,
    durability: str,
    directory: str | None,
) -> dict[str, Any]:
    dbs = Databases(url, directory)
    figures: dict[str, list[float]] = {"plain": [], "fair": []}
    try:
        for r in range(rounds):
            for variant in figures:
                per_s = _run(
                    dbs.fresh(f"fair_{variant}_{r}"), jobs, concurrency, variant, durability
                )
                figures[variant].append(per_s)
                progress(f"fairness round {r + 1}/{rounds} {variant}: {per_s:,.0f} jobs/s")
    finally:
        dbs.close()
    paired = [f / p for f, p in zip(figures["fair"], figures["plain"], strict=True)]
    return {
        "backend": "postgresql" if dbs.postgres else "sqlite",
        "jobs": jobs,
        "values": VALUES,
        "concurrency": concurrency,
        "rounds": figures,
        "best": {k: max(v) for k, v in figures.items()},
        "fair_vs_plain": statistics.median(paired),
    }


def report_fairness(r: dict[str, Any]) -> None:
    best = r["best"]
    print(
        f"fairness bench ({r['backend']}, {r['jobs']:,} no-op jobs over {r['values']:,} fair "
        f"values, concurrency {r['concurrency']}, {len(r['rounds']['plain'])} rounds; best jobs/s)"
    )
    print(f"  plain (no fair)                 {best['plain']:>9,.0f}")
    print(f"  fair='tenant', all values due   {best['fair']:>9,.0f}")
    print(f"  fair / plain (median paired)    {r['fair_vs_plain']:>9.2f}x")
