"""``errands bench --fairness``: what fair share costs the claim (issue #34).

Two runs of the same no-op jobs through one in-process worker (burst, ``--concurrency``
threads), each on a fresh database, alternated over ``--rounds``:

* ``plain``: a task without ``fair`` (the plain claim);
* ``fair``: the same jobs of a task with ``fair="tenant"``, spread over 1,000 tenants, every
  one due (the limited claim: the groups' scan, the stored turns, a probe per value served).

``fair / plain`` is the figure the issue asks >= 0.8 of.
"""

from __future__ import annotations

from typing import Any

from ...queue import Queue
from . import Databases
from .drain import Setup, drain, median_paired, rounds_of

VALUES = 1000


def _setup(jobs: int) -> Setup:
    def setup(q: Queue, variant: str) -> None:
        if variant == "plain":

            @q.task(name="work")
            def plain(tenant: str) -> None:
                pass

        else:

            @q.task(name="work", fair="tenant")
            def fair(tenant: str) -> None:
                pass

        q.enqueue_many([("work", {"tenant": f"t{i % VALUES}"}) for i in range(jobs)])

    return setup


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
    setup = _setup(jobs)
    try:
        figures = rounds_of(
            dbs,
            "fairness",
            ("plain", "fair"),
            rounds,
            lambda url, variant: drain(url, jobs, concurrency, durability, variant, setup),
        )
    finally:
        dbs.close()
    return {
        "backend": "postgresql" if dbs.postgres else "sqlite",
        "jobs": jobs,
        "values": VALUES,
        "concurrency": concurrency,
        "rounds": figures,
        "best": {k: max(v) for k, v in figures.items()},
        "fair_vs_plain": median_paired(figures["fair"], figures["plain"]),
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
