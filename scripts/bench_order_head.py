"""One stuck ordered value with a long backlog (issue #34): what the claim's head probe and
one claim cost. ``--backlog`` jobs (default 10,000) of account ``stuck`` wait behind its head,
which is running and never ends; ``--others`` accounts have one job each; ``--history``
jobs of another type were enqueued before them all (other work in the table, at lower ids).

    python scripts/bench_order_head.py [--db sqlite|postgresql://…] [--backlog 10000]

Prints the head probe's plan for the stuck value (SQLite: EXPLAIN QUERY PLAN; PostgreSQL:
EXPLAIN ANALYZE, BUFFERS), the median of ``--probes`` runs of that probe, and the median and
90th percentile of one claim (one job a claim, as a worker of concurrency 1 claims) while
the other accounts' jobs are taken — each of those claims probes the stuck value too.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from bench_deps import fresh

import errands
from errands.backends.base import ClaimRequest

KEY = "order:account"


def run(spec: str, backlog: int, others: int, history: int, probes: int) -> None:
    url, drop = fresh(spec)
    try:
        with errands.Queue(url) as q:

            @q.task(order="account")
            def post(account: str, n: int) -> None: ...

            @q.task
            def other(n: int) -> None: ...

            for start in range(0, history, 1000):
                q.enqueue_many([("other", {"n": i}) for i in range(start, start + 1000)])
            backend: Any = q.backend
            q.enqueue("post", {"account": "stuck", "n": 0})
            request = ClaimRequest("bench", ["post"], None, 1, 3600.0, True, order={KEY: False})
            (head,) = backend.claim(request, q.clock())  # running, and never ends
            for start in range(1, backlog + 1, 1000):
                end = min(start + 1000, backlog + 1)
                q.enqueue_many([("post", {"account": "stuck", "n": i}) for i in range(start, end)])
            q.enqueue_many([("post", {"account": f"a{i:04d}", "n": 0}) for i in range(others)])
            sqlite = url.endswith(".db")
            if not sqlite:
                with backend._write("bench") as conn:
                    conn.execute("ANALYZE jobs")
            params = {
                "now": q.clock(),
                "types": backend._list(["post"]),
                "queues": None,
                "key": KEY,
                "grp": "stuck",
            }
            text = backend.q["order_head"]
            with backend._read() as conn:
                explain = "EXPLAIN QUERY PLAN " if sqlite else "EXPLAIN (ANALYZE, BUFFERS) "
                plan = conn.execute(explain + text, params).fetchall()
                took = []
                for _ in range(probes):
                    t0 = time.perf_counter()
                    row = conn.execute(text, params).fetchone()
                    took.append(time.perf_counter() - t0)
                assert row[0] == head.id, row
            print(f"{spec.split(':')[0]}: head probe of a value with {backlog} jobs behind it")
            for line in plan:
                print("   ", line[-1])
            print(f"  probe: median {statistics.median(took) * 1000:.3f} ms over {probes}")
            claims = []
            for _ in range(others):
                t0 = time.perf_counter()
                got = backend.claim(request, q.clock())
                claims.append(time.perf_counter() - t0)
                assert len(got) == 1 and got[0].id != head.id, got
            claims.sort()
            print(
                f"  claim (1 job, {others} accounts + the stuck one): median "
                f"{statistics.median(claims) * 1000:.2f} ms, p90 "
                f"{claims[int(len(claims) * 0.9)] * 1000:.2f} ms"
            )
    finally:
        drop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--db", default="sqlite")
    p.add_argument("--backlog", type=int, default=10_000)
    p.add_argument("--others", type=int, default=200)
    p.add_argument("--history", type=int, default=10_000)
    p.add_argument("--probes", type=int, default=200)
    args = p.parse_args()
    run(args.db, args.backlog, args.others, args.history, args.probes)


if __name__ == "__main__":
    main()
