"""Cancelling the head of a long chain (issue #32): the cancel cascades down every step in
the operator's one transaction (docs/pipelines.md). Measures ``q.cancel(head)`` of a chain of
``--steps`` jobs (default 3,001: 3,000 dependents), and that every step ended cancelled.

    python scripts/bench_cascade.py [--db sqlite|postgresql://…] [--steps 3001] [--rounds 3]

Each round runs on a fresh database (a temp SQLite file, or a new PostgreSQL database next
to the one given); the figure is the cancel call's wall time.
"""

from __future__ import annotations

import argparse
import time

from bench_deps import fresh

import errands


def one(spec: str, steps: int) -> float:
    url, drop = fresh(spec)
    try:
        with errands.Queue(url) as q:

            @q.task
            def step(n: int) -> None: ...

            ids = q.chain([("step", {"n": n}) for n in range(steps)])
            t0 = time.perf_counter()
            q.cancel(ids[0])
            took = time.perf_counter() - t0
            cancelled = sum(c.count for c in q.backend.state_counts() if c.status == "cancelled")
            assert cancelled == steps, cancelled
            return took
    finally:
        drop()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--db", default="sqlite")
    p.add_argument("--steps", type=int, default=3001)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    times = sorted(one(args.db, args.steps) for _ in range(args.rounds))
    print(
        f"{args.db.split(':')[0]}: cancel the head of a {args.steps}-step chain: "
        f"{', '.join(f'{t:.3f}' for t in times)} s"
    )


if __name__ == "__main__":
    main()
