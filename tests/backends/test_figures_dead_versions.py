"""PostgreSQL only (SQLite keeps no row versions): every upsert of a counter row leaves a
version a held snapshot keeps (VACUUM cannot remove it), and the next upsert of the same key
walks them all. The worker's count into ``job_counts`` moves to a new shard of its connection
every minute (jobs.sql ``count_grouped_jobs``), so what an upsert walks is one minute of
batches, not the whole hold. Counted in buffers, not timed."""

from __future__ import annotations

import json
import re
from typing import Any

import psycopg

import errands

UPSERTS_UNDER_SNAPSHOT = 3_000
T = 1_800_000_000.0  # at the start of a minute


def count(conn: psycopg.Connection[Any], sql: str, now: float, explain: bool = False) -> int:
    """One count of a worker's batch on ``conn`` (its own transaction, as a worker's); with
    ``explain``, run for real under EXPLAIN and return the shared buffers it touched."""
    params = {"rows": json.dumps([["succeeded", "default", "t", 1]]), "now": now}
    if not explain:
        conn.execute(sql.encode(), params)
        return 0
    lines = [r[0] for r in conn.execute(b"EXPLAIN (ANALYZE, BUFFERS) " + sql.encode(), params)]
    plan = "\n".join(str(line) for line in lines)
    hits = re.search(r"Buffers: shared hit=(\d+)(?: read=(\d+))?", plan)
    assert hits, plan
    return int(hits.group(1)) + int(hits.group(2) or 0)


def test_the_worker_count_walks_one_minute_of_versions_not_the_whole_hold(pg_url: str) -> None:
    with (
        errands.Queue(pg_url) as q,
        psycopg.connect(pg_url) as holder,
        psycopg.connect(pg_url, autocommit=True) as worker,
    ):
        holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        holder.execute("SELECT count(*) FROM job_counts").fetchone()  # held from here
        sql: str = q.backend.q["count_grouped_jobs"]  # type: ignore[attr-defined]
        for k in range(UPSERTS_UNDER_SNAPSHOT):  # one backend, as a worker's connection
            count(worker, sql, T + k * 0.01)
        same_minute = count(worker, sql, T + 30, explain=True)
        next_minute = count(worker, sql, T + 60, explain=True)
        assert same_minute > 5 * next_minute, (same_minute, next_minute)
        holder.rollback()
        total = worker.execute("SELECT SUM(n) FROM job_counts").fetchone()
        assert total == (UPSERTS_UNDER_SNAPSHOT + 2,)  # readers sum the shards
