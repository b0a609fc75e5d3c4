"""``errands bench --steps``: what durable steps cost (docs/durable-steps.md).

Three runs of the same number of jobs through one in-process worker (burst, ``--concurrency``
threads), each on a fresh database, alternated over ``--rounds``:

* ``plain``: no-op jobs;
* ``three_steps``: jobs that each record three no-op steps (``ctx.step``);
* ``beside_parked``: the no-op jobs beside 10,000 jobs parked first — half asleep for a day
  (``ctx.sleep``), half waiting for a signal nobody sends (``ctx.wait_for``) — then, on
  PostgreSQL, a ``VACUUM ANALYZE`` (what autovacuum does after such a burst of updates).

``three_steps / plain`` and the cost of one step in µs (the extra time per job over three);
``beside_parked / plain``: what parked jobs cost the work beside them (the issue asks >= 0.9).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from ...context import JobContext
from ...queue import Queue
from ...worker import Worker
from . import Databases, progress

PARKED = 10_000
VARIANTS = ("plain", "three_steps", "beside_parked")


def _nothing() -> None:
    return None


def _park(q: Queue, url: str, concurrency: int, parked: int) -> None:
    q.enqueue_many([("parked", {"i": i}) for i in range(parked)])
    Worker(q, concurrency=concurrency, burst=True, handle_signals=False).run()
    counts = q.stats()["counts"]
    if counts.get("waiting", 0) + counts.get("queued", 0) != parked:
        raise RuntimeError(f"parking {parked} jobs left {counts}")
    if url.startswith("postgresql"):
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE")


def _run(
    url: str, jobs: int, concurrency: int, variant: str, durability: str, n_parked: int
) -> float:
    """jobs/s of ``jobs`` jobs drained by one burst worker."""
    with Queue(url, durability=durability) as q:

        @q.task
        def plain() -> None:
            pass

        @q.task
        def steps3(ctx: JobContext) -> None:
            for name in ("a", "b", "c"):
                ctx.step(name, _nothing)

        @q.task
        def parked(ctx: JobContext, i: int) -> None:
            if i % 2:
                ctx.sleep(86400)
            else:
                ctx.wait_for("never")

        if variant == "beside_parked":
            _park(q, url, concurrency, n_parked)
        task = "steps3" if variant == "three_steps" else "plain"
        q.enqueue_many([(task, {})] * jobs)
        start = time.perf_counter()
        Worker(q, concurrency=concurrency, burst=True, handle_signals=False).run()
        elapsed = time.perf_counter() - start
        done = q.stats()["counts"]["succeeded"]
        if done != jobs:
            raise RuntimeError(f"{variant}: {done} of {jobs} jobs ran")
    return jobs / elapsed


def measure_steps(
    *,
    url: str | None,
    jobs: int,
    rounds: int,
    concurrency: int,
    durability: str,
    directory: str | None,
    parked: int = PARKED,
) -> dict[str, Any]:
    dbs = Databases(url, directory)
    figures: dict[str, list[float]] = {v: [] for v in VARIANTS}
    try:
        for r in range(rounds):
            for variant in VARIANTS:
                fresh = dbs.fresh(f"steps_{variant}_{r}")
                per_s = _run(fresh, jobs, concurrency, variant, durability, parked)
                figures[variant].append(per_s)
                progress(f"steps round {r + 1}/{rounds} {variant}: {per_s:,.0f} jobs/s")
    finally:
        dbs.close()
    pairs = list(zip(*(figures[v] for v in VARIANTS), strict=True))
    return {
        "backend": "postgresql" if dbs.postgres else "sqlite",
        "jobs": jobs,
        "parked": parked,
        "concurrency": concurrency,
        "durability": durability,
        "rounds": figures,
        "best": {k: max(v) for k, v in figures.items()},
        "three_steps_vs_plain": statistics.median(s / p for p, s, _ in pairs),
        "step_us": statistics.median((1 / s - 1 / p) / 3 * 1e6 for p, s, _ in pairs),
        "beside_parked_vs_plain": statistics.median(b / p for p, _, b in pairs),
    }


def report_steps(r: dict[str, Any]) -> None:
    best = r["best"]
    print(
        f"steps bench ({r['backend']}, durability={r['durability']}, {r['jobs']:,} jobs, "
        f"concurrency {r['concurrency']}, {len(r['rounds']['plain'])} rounds; best jobs/s)"
    )
    print(f"  no-op jobs                             {best['plain']:>9,.0f}")
    print(f"  jobs recording three no-op steps       {best['three_steps']:>9,.0f}")
    print(f"  no-op jobs beside {r['parked']:,} parked ones    {best['beside_parked']:>9,.0f}")
    print(f"  three steps / none (median paired)     {r['three_steps_vs_plain']:>9.3f}x")
    print(f"  one recorded step (median), µs         {r['step_us']:>9,.0f}")
    print(f"  beside parked / plain (median paired)  {r['beside_parked_vs_plain']:>9.2f}x")
