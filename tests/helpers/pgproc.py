"""Subprocess roles for the multi-process PostgreSQL tests:
``python tests/helpers/pgproc.py ROLE URL …``.

Each role is a real, separate process with its own connections, as a worker on another host
would be (over TCP to 127.0.0.1).
"""

from __future__ import annotations

import json
import sys
import time

import errands
from errands.backends.base import ClaimRequest


def make_queue(url: str, **settings: float) -> errands.Queue:
    q = errands.Queue(url, **settings)  # type: ignore[arg-type]

    @q.task
    def note(n: int = 0) -> int:
        return n

    @q.task
    def slow(seconds: float = 60.0) -> None:
        time.sleep(seconds)

    return q


def claim_all(url: str, worker_id: str, limit: int) -> None:
    """Claim until nothing is left (never finishing), print every (job id, attempt) held."""
    held: list[tuple[int, int]] = []
    with errands.Queue(url) as q:
        empty = 0
        while empty < 3:  # three empty claims in a row: the others hold the rest
            got = q.backend.claim(ClaimRequest(worker_id, ["note"], None, limit, 600), time.time())
            held += [(j.id, j.attempt) for j in got]
            empty = 0 if got else empty + 1
    print(json.dumps(held))


def worker(url: str, lease: float, burst: bool) -> None:
    with make_queue(url, lease_seconds=lease, poll_interval=0.5) as q:
        summary = q.run_worker(concurrency=4, burst=burst)
    print(json.dumps({"processed": summary.processed}))


def enqueue(url: str, job_type: str, count: int) -> None:
    with errands.Queue(url) as q:
        ids = q.enqueue_many([(job_type, {}) for _ in range(count)])
    print(json.dumps(ids))


if __name__ == "__main__":
    role, url, *rest = sys.argv[1:]
    if role == "claim":
        claim_all(url, rest[0], int(rest[1]))
    elif role == "worker":
        worker(url, float(rest[0]), rest[1] == "burst")
    elif role == "enqueue":
        enqueue(url, rest[0], int(rest[1]))
    else:
        raise SystemExit(f"unknown role {role!r}")
