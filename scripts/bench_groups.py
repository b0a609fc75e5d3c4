"""Many rate-limited groups (issue #32): how long until every group has started, and what
one claim costs, with ``--groups`` groups (default 10,000) of two jobs each behind
``Limit("per-user", rate=(1, 3600), group="user")`` — each group may start one job an hour.

    python scripts/bench_groups.py [--db sqlite|postgresql://…] [--groups 10000] [--take 16]

One process claims as a worker does (``--take`` jobs a claim: concurrency 8 plus a prefetch
of 8), straight through the backend's claim, until every group has started or a claim
comes back empty (what a starved group looks like: its jobs due, none claimable). Prints
the claims made, the groups started, the wall time, and the median and 90th percentile of
one claim's time.
"""

from __future__ import annotations

import argparse
import statistics
import time

from bench_deps import fresh

import errands
from errands.backends.base import ClaimRequest


def run(spec: str, groups: int, take: int) -> None:
    url, drop = fresh(spec)
    try:
        with errands.Queue(url) as q:
            limit = errands.Limit("per-user", rate=(1, 3600), group="user")

            @q.task(limit=limit)
            def notify(user: str) -> None: ...

            q.enqueue_many(
                [("notify", {"user": f"u{i:06d}"}) for i in range(groups) for _ in (0, 1)]
            )
            q.backend.register_limits([limit.spec()], q.clock())
            request = ClaimRequest("bench", ["notify"], None, take, 60.0, True)
            started: set[int] = set()  # job ids: one a group can start in its hour
            took: list[float] = []
            t0 = time.perf_counter()
            while len(started) < groups:
                c0 = time.perf_counter()
                got = q.backend.claim(request, q.clock())
                took.append(time.perf_counter() - c0)
                if not got:
                    break
                started |= {j.id for j in got}
            wall = time.perf_counter() - t0
            took.sort()
            print(
                f"{spec.split(':')[0]}: {groups} groups, {take} a claim: {len(took)} claims, "
                f"{len(started)} groups started in {wall:.1f} s; one claim: median "
                f"{statistics.median(took) * 1000:.1f} ms, p90 "
                f"{took[int(len(took) * 0.9)] * 1000:.1f} ms"
            )
    finally:
        drop()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--db", default="sqlite")
    p.add_argument("--groups", type=int, default=10000)
    p.add_argument("--take", type=int, default=16)
    args = p.parse_args()
    run(args.db, args.groups, args.take)


if __name__ == "__main__":
    main()
