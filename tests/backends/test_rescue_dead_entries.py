"""PostgreSQL only (SQLite removes a finished job's index entry with the change itself): while a
transaction holds a snapshot, VACUUM cannot remove the entries finished jobs leave in the index
of running jobs. A rescuer's sweep from the front reads each of them whose lease has passed
(and its heap row) to find the live ones; the resumed sweep starts where the last one saw
every lease expired, so its reads stay a few pages however many jobs finished under the
snapshot, and it still recovers the lease that expired since; past the probe period too, the
look behind the position being a probe's on a thread of its own. Counted in buffers, not
timed."""

from __future__ import annotations

import re
from typing import Any

import psycopg

import errands
from errands.backends.base import ClaimRequest, Succeeded
from errands.backends.lease_sweep import FROM_THE_FRONT, FRONT_SWEEP_SECONDS, SLACK
from helpers.support import FixedClock

FINISHED_UNDER_SNAPSHOT = 10_000
LEASE = 60.0


def buffers(q: errands.Queue, params: dict[str, Any]) -> int:
    """Shared buffers the sweep's statement touched, run for real under EXPLAIN ANALYZE."""
    backend: Any = q.backend
    with backend._write("expired_leases") as conn:
        sql = "EXPLAIN (ANALYZE, BUFFERS) " + backend.q["expired_leases"]
        lines = [r[0] for r in conn.raw.execute(sql.encode(), params).fetchall()]
    plan = "\n".join(lines)
    hits = re.search(r"Buffers: shared hit=(\d+)(?: read=(\d+))?", plan)
    assert hits, plan
    return int(hits.group(1)) + int(hits.group(2) or 0)


def finish_all_under_a_snapshot(q: errands.Queue, clock: FixedClock) -> None:
    """FINISHED_UNDER_SNAPSHOT jobs claimed with a LEASE-second lease and finished at once:
    each leaves its dead entry in jobs_running, its lease LEASE after its claim."""
    q.enqueue_many([("t", {})] * FINISHED_UNDER_SNAPSHOT)
    request = ClaimRequest("w", ["t"], None, 500, LEASE)
    finished = 0
    while finished < FINISHED_UNDER_SNAPSHOT:
        got = q.backend.claim(request, clock())
        assert got
        outcomes = [Succeeded(j.id, j.attempt, clock(), None) for j in got]
        assert all(q.backend.finish(outcomes, "w", clock(), got))
        finished += len(got)


def test_the_resumed_sweep_does_not_read_the_entries_a_held_snapshot_keeps(pg_url: str) -> None:
    clock = FixedClock()
    with errands.Queue(pg_url, clock=clock) as q, psycopg.connect(pg_url) as holder:
        holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        holder.execute("SELECT count(*) FROM jobs").fetchone()  # the snapshot, held from here
        finish_all_under_a_snapshot(q, clock)
        clock.advance(LEASE + SLACK + 1)  # every dead entry's lease passed, SLACK ago
        assert q.backend.rescue(clock()).recovered == []  # a sweep from the front, nothing live
        lost = q.enqueue("t", {})
        (job,) = q.backend.claim(ClaimRequest("gone", ["t"], None, 1, 5.0), clock())
        assert job.id == lost
        clock.advance(6.0)  # its worker died: the lease passed
        backend: Any = q.backend
        resumed = backend.lease_sweep.start(clock())
        assert resumed != FROM_THE_FRONT  # the rescuer's next sweep resumes
        base = {"now": clock(), "limit": 1000}
        from_the_front = buffers(q, {**base, "after": FROM_THE_FRONT})
        resumed_reads = buffers(q, {**base, "after": resumed})
        assert from_the_front > 5 * resumed_reads, (from_the_front, resumed_reads)
        assert q.backend.rescue(clock()).recovered == [lost]  # resumed, and it found the lease
        clock.advance(FRONT_SWEEP_SECONDS)
        assert backend.lease_sweep.start(clock()) != FROM_THE_FRONT  # a probe period later too
        holder.rollback()


def test_a_lease_skipped_while_locked_is_recovered_by_the_next_sweep(pg_url: str) -> None:
    """SKIP LOCKED passes over a row another transaction holds (a worker's heartbeat or
    outcome about to commit); if that transaction rolls back (its worker was killed) the lease
    is still expired, and the next sweep, not the next front sweep, recovers it."""
    clock = FixedClock()
    with errands.Queue(pg_url, clock=clock) as q, psycopg.connect(pg_url) as other:
        assert q.backend.rescue(clock()).recovered == []  # the first sweep: from the front
        lost = q.enqueue("t", {})
        (job,) = q.backend.claim(ClaimRequest("gone", ["t"], None, 1, 5.0), clock())
        clock.advance(6.0)
        other.execute("SELECT id FROM jobs WHERE id = %s FOR UPDATE", (lost,)).fetchone()
        assert q.backend.rescue(clock()).recovered == []  # skipped: locked
        clock.advance(SLACK + 2)
        assert q.backend.rescue(clock()).recovered == []  # still locked, its lease long past
        other.rollback()  # its holder died without writing
        clock.advance(1.0)
        assert q.backend.rescue(clock()).recovered == [job.id]
