"""``errands bench --limits``: what limits cost the jobs they do not hold (issue #23).

Three runs of the same unlimited no-op jobs through one in-process worker (burst,
``--concurrency`` threads), each on a fresh database, alternated over ``--rounds``:

* ``plain``: the worker has no limited task (the claim reads unlimited jobs only);
* ``limited``: it also handles a limited task, none of whose jobs wait (the claim's limited
  pass runs and finds nothing);
* ``saturated``: the same, with 10,000 jobs of that task waiting on a key with no headroom
  (``running=0``) in front of them.

``saturated / limited`` is the head-of-line figure (the issue asks >= 0.9); ``limited /
plain`` what the limited pass costs. Then a limited key with ``running=4`` and 20 ms jobs on a
worker of 16 threads: its jobs/s against the cap's 200/s, and the most that ran at once.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from ...limits import Limit
from ...queue import Queue
from ...worker import Worker
from . import Databases
from .drain import Setup, drain, median_paired, rounds_of

HELD = 10_000
CAP, CAP_JOBS, CAP_SECONDS = 4, 200, 0.02


def _setup(jobs: int) -> Setup:
    def setup(q: Queue, variant: str) -> None:
        @q.task
        def free() -> None:
            pass

        if variant != "plain":

            @q.task(limit=Limit("held", running=0))
            def held() -> None:
                pass

            if variant == "saturated":
                q.enqueue_many([("held", {})] * HELD)
        q.enqueue_many([("free", {})] * jobs)

    return setup


def _cap(url: str, durability: str) -> dict[str, Any]:
    running = peak = 0
    lock = threading.Lock()
    with Queue(url, durability=durability, poll_interval=0.01) as q:

        @q.task(limit=Limit("capped", running=CAP))
        def capped() -> None:
            nonlocal running, peak
            with lock:
                running += 1
                peak = max(peak, running)
            time.sleep(CAP_SECONDS)
            with lock:
                running -= 1

        q.enqueue_many([("capped", {})] * CAP_JOBS)
        start = time.perf_counter()
        w = Worker(q, concurrency=16, burst=True, handle_signals=False)
        w.run()
        elapsed = time.perf_counter() - start
    return {
        "cap": CAP,
        "peak_running": peak,
        "per_second": CAP_JOBS / elapsed,
        "cap_per_second": CAP / CAP_SECONDS,
    }


def measure_limits(
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
            "limits",
            ("plain", "limited", "saturated"),
            rounds,
            lambda url, variant: drain(url, jobs, concurrency, durability, variant, setup),
        )
        cap = _cap(dbs.fresh("lim_cap"), durability)
    finally:
        dbs.close()
    return {
        "backend": "postgresql" if dbs.postgres else "sqlite",
        "jobs": jobs,
        "held": HELD,
        "concurrency": concurrency,
        "rounds": figures,
        "best": {k: max(v) for k, v in figures.items()},
        "saturated_vs_limited": median_paired(figures["saturated"], figures["limited"]),
        "limited_vs_plain": median_paired(figures["limited"], figures["plain"]),
        "cap": cap,
    }


def report_limits(r: dict[str, Any]) -> None:
    best = r["best"]
    print(
        f"limits bench ({r['backend']}, {r['jobs']:,} unlimited no-op jobs, "
        f"concurrency {r['concurrency']}, {len(r['rounds']['plain'])} rounds; best jobs/s)"
    )
    print(f"  plain (no limited task)              {best['plain']:>9,.0f}")
    print(f"  limited task, nothing waiting        {best['limited']:>9,.0f}")
    print(f"  {r['held']:,} waiting on a saturated key   {best['saturated']:>9,.0f}")
    print(f"  saturated / limited (median paired)  {r['saturated_vs_limited']:>9.2f}x")
    print(f"  limited / plain (median paired)      {r['limited_vs_plain']:>9.2f}x")
    c = r["cap"]
    print(
        f"  a key capped at running={c['cap']} ({CAP_SECONDS * 1000:.0f} ms jobs): "
        f"{c['per_second']:,.0f} jobs/s of a {c['cap_per_second']:,.0f}/s cap, "
        f"at most {c['peak_running']} at once"
    )
