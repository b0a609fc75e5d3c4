"""PostgreSQL only (SQLite removes a claimed job's index entry with the change itself): while
a transaction holds a snapshot, VACUUM cannot remove the due-jobs index entries of claimed
jobs. A claim that scans from the front reads each of them (and its heap row) before the first
live job; the worker's claim, resumed from its position, does not: its reads stay a few pages
however many jobs were claimed under the snapshot, also past the probe period, when the look
behind the position is a probe's on a thread of its own, not the claim's. Counted in buffers,
not timed."""

from __future__ import annotations

import re
from typing import Any

import psycopg

import errands
from errands.backends.base import ClaimRequest
from errands.backends.claim_position import FROM_THE_FRONT, FRONT_SCAN_SECONDS
from helpers.support import FixedClock

CLAIMED_UNDER_SNAPSHOT = 10_000


def buffers(q: errands.Queue, params: dict[str, Any]) -> int:
    """Shared buffers the claim statement touched, run for real under EXPLAIN ANALYZE."""
    backend: Any = q.backend
    with backend._write("claim") as conn:
        sql = "EXPLAIN (ANALYZE, BUFFERS) " + backend.q["claim_recorded"]
        lines = [r[0] for r in conn.raw.execute(sql.encode(), params).fetchall()]
    plan = "\n".join(lines)
    hits = re.search(r"Buffers: shared hit=(\d+)(?: read=(\d+))?", plan)
    assert hits, plan
    return int(hits.group(1)) + int(hits.group(2) or 0)


def test_the_resumed_claim_does_not_read_the_entries_a_held_snapshot_keeps(pg_url: str) -> None:
    clock = FixedClock()
    with errands.Queue(pg_url, clock=clock) as q, psycopg.connect(pg_url) as holder:
        holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        holder.execute("SELECT count(*) FROM jobs").fetchone()  # the snapshot, held from here
        q.enqueue_many([("t", {})] * CLAIMED_UNDER_SNAPSHOT)
        clock.advance(1.0)  # claimed a second after they were due, as a worker under load
        request = ClaimRequest("w", ["t"], None, 500, 60.0)
        claimed = 0
        while claimed < CLAIMED_UNDER_SNAPSHOT:
            got = q.backend.claim(request, q.clock())
            assert got
            claimed += len(got)
        clock.advance(1.0)
        q.enqueue("t", {})  # the one live job, behind 10,000 dead entries
        base = {
            "to_state": "running",
            "worker_id": "w",
            "now": q.clock(),
            "lease_seconds": 60.0,
            "types": ["t"],
            "queues": None,
            "limit": 100,
            "status": "running",
            "event": None,
        }
        backend: Any = q.backend
        resumed = backend.claim_position.params(["t"], None, base["now"])
        assert resumed != FROM_THE_FRONT  # the worker's next claim resumes
        from_the_front = buffers(q, {**base, **FROM_THE_FRONT})
        resumed_reads = buffers(q, {**base, **resumed})
        assert from_the_front > 5 * resumed_reads, (from_the_front, resumed_reads)
        # A probe period later the claim still resumes; the probe behind the position finds a
        # job come due there (enqueued with a run_at before every dead entry) and moves the
        # position back to it.
        clock.advance(FRONT_SCAN_SECONDS)
        behind = q.enqueue("t", {}, run_at=q.clock() - 3600)
        later = backend.claim_position.params(["t"], None, q.clock())
        assert later != FROM_THE_FRONT
        assert buffers(q, {**base, "now": q.clock(), **later}) < from_the_front / 5
        one = ClaimRequest("w", ["t"], None, 1, 60.0)
        taken = [j.id for j in q.backend.claim(one, q.clock())]  # resumed; starts the probe
        backend.claim_position.settle()
        taken += [j.id for j in q.backend.claim(one, q.clock())]
        assert behind in taken
        holder.rollback()
