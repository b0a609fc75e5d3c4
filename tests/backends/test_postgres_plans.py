"""PostgreSQL only: the worker's batch statements touch only their batch's rows, through
indexes, even while the table's statistics are stale (right after a bulk enqueue, before
autovacuum analyzes it). Planner choices are PostgreSQL-specific; SQLite pins its plans in
its query file (INDEXED BY, unary +) and tests/client/test_stats.py reads its EXPLAIN QUERY PLAN.
"""

from __future__ import annotations

import json
import re
from typing import Any

import errands
from errands.backends.claim_position import FRONT
from helpers.ops import run_job


def plan(q: errands.Queue, verb: str, name: str, params: dict[str, Any]) -> str:
    backend: Any = q.backend
    with backend._write(verb) as conn:
        rows = conn.raw.execute(("EXPLAIN " + backend.q[name]).encode(), params).fetchall()
        return "\n".join(r[0] for r in rows)


def test_claim_and_successes_use_indexes_with_stale_statistics(pg_url: str) -> None:
    with errands.Queue(pg_url) as q:
        ids = q.enqueue_many([("t", {"n": n}) for n in range(3000)])  # no ANALYZE since
        now = q.clock()
        # PostgreSQL's one-statement claim (own.sql; it keeps no claim of its own).
        recorded = plan(
            q,
            "claim",
            "claim_recorded",
            {
                "to_state": "running",
                "worker_id": "w",
                "now": now,
                "lease_seconds": 60.0,
                "types": ["t"],
                "queues": None,
                "limit": 100,
                "status": "running",
                "event": "CLAIMED",
                "after_priority": FRONT,
                "after_run_at": 0.0,
                "after_id": 0,
            },
        )
        assert "jobs_due" in recorded, recorded
        assert "Sort" not in recorded and "Seq Scan" not in recorded, recorded

        # Resumed from a position, the position's priority starts the index scan at its run_at
        # (an index condition, not a filter over every entry before it).
        resumed = plan(
            q,
            "claim",
            "claim_recorded",
            {
                "to_state": "running",
                "worker_id": "w",
                "now": now,
                "lease_seconds": 60.0,
                "types": ["t"],
                "queues": None,
                "limit": 100,
                "status": "running",
                "event": "CLAIMED",
                "after_priority": 0,
                "after_run_at": now - 1,
                "after_id": 5,
            },
        )
        assert re.search(r"Index Cond: \(\(priority = .*ROW\(run_at, id\) > ", resumed), resumed
        assert "Sort" not in resumed and "Seq Scan" not in resumed, resumed

        batch = json.dumps([[i, 1, now, None] for i in ids[:100]])
        succeed = plan(
            q,
            "finish",
            "succeed_jobs",
            {"to_state": "succeeded", "from_state": "running", "now": now, "batch": batch},
        )
        assert "jobs_pkey" in succeed, succeed
        assert "Seq Scan" not in succeed and "Hash" not in succeed, succeed

        opened = plan(
            q,
            "claim",
            "open_attempts",
            {"job_ids": json.dumps(ids[:100]), "now": now, "status": "running"},
        )
        assert "jobs_pkey" in opened and "Seq Scan on jobs" not in opened, opened

        # The figures a write counts (figures.py): its rows by primary key, never a range of
        # a status index or a scan that grows with the finished rows.
        # Every path but the worker's runs them without the batch's planner settings.
        for verb, name in (
            ("finish", "count_batch_jobs"),
            ("finish", "count_batch_minutes"),
            ("finish", "count_batch_errors"),
            ("cancel", "count_batch_jobs"),
            ("rescue", "count_batch_minutes"),
            ("retry", "uncount_jobs"),
            ("prune", "uncount_job_errors"),
            ("prune", "prune_batch"),
        ):
            params = {"job_ids": json.dumps(ids[:100]), "with_runs": True}
            counted = plan(q, verb, name, params)
            # (job_stats_bounds, 21 rows, may be scanned: its size is fixed.)
            scans = re.findall(r"Seq Scan on (\w+)", counted)
            assert "jobs_pkey" in counted and set(scans) <= {"job_stats_bounds"}, counted
            assert "jobs_finished" not in counted and "jobs_status" not in counted, counted
        # The worker's batch: rows grouped in Python, upserted; no table is read at all.
        for name, rows in (
            ("count_grouped_jobs", [["succeeded", "default", "t", 3]]),
            ("count_grouped_minutes", [["run", "default", 4, 3, 0.25, 0.1]]),
            ("count_grouped_errors", [["APP:X", "t", 3]]),
        ):
            grouped = plan(q, "finish", name, {"rows": json.dumps(rows), "now": now})
            assert "Scan on job" not in grouped, grouped


def test_planner_settings_stay_inside_the_batch_transaction(pg_url: str) -> None:
    with errands.Queue(pg_url) as q:
        backend: Any = q.backend
        for verb in ("claim", "finish"):
            with backend._write(verb) as conn:
                assert conn.raw.execute("SHOW enable_seqscan").fetchone()[0] == "off"
                # Forbidden plans are priced, not refused: JIT must not see those prices.
                assert conn.raw.execute("SHOW jit").fetchone()[0] == "off"
        with backend._read() as conn:
            assert conn.raw.execute("SHOW enable_seqscan").fetchone()[0] == "on"


def test_the_limited_claim_finds_its_chosen_ids_by_primary_key_with_stale_statistics(
    pg_url: str,
) -> None:
    """The limited and fair claim choose their jobs first, then claim them by id: with the
    queued rows underestimated (a burst enqueued since the last ANALYZE), each id must still
    be one probe of the primary key, not a walk of a partial index of queued rows per id
    (was ~80 ms a claim of 1,000 fair jobs, BENCHMARKS.md)."""
    with errands.Queue(pg_url) as q:

        @q.task(fair="tenant")
        def work(tenant: str) -> None: ...

        ids = q.enqueue_many([("work", {"tenant": f"t{n % 100}"}) for n in range(3000)])
        now = q.clock()
        chosen = {"job_ids": json.dumps(ids[:1000]), "now": now}
        claimed = plan(
            q,
            "claim",
            "claim_ids",
            {**chosen, "to_state": "running", "worker_id": "w", "lease_seconds": 60.0},
        )
        opened = plan(q, "claim", "open_attempts", {**chosen, "status": "running"})
        events = plan(q, "claim", "insert_claimed_events", {**chosen, "event": "CLAIMED"})
        # PostgreSQL's own statement writing them all at once (own.sql) finds them the same way.
        recorded = plan(
            q,
            "claim",
            "claim_ids_recorded",
            {
                **chosen,
                "to_state": "running",
                "worker_id": "w",
                "lease_seconds": 60.0,
                "status": "running",
                "event": "CLAIMED",
                "rated": json.dumps({"fair:tenant": {"t1": 1}}),
                "started_at": now + 60.0,
                "picks": json.dumps({i: [0.0, 1.0] for i in ids[:1000]}),
            },
        )
        for found in (claimed, opened, events, recorded):
            assert "jobs_pkey" in found, found
            assert "Nested Loop" not in found and "Seq Scan on jobs" not in found, found
            assert "jobs_queued_run_at" not in found and "jobs_limited_due" not in found, found


def test_the_sample_of_an_error_group_is_one_step_down_its_index(pg_url: str) -> None:
    """/failures shows each error group's newest message (error_sample, once per group): it
    must read a row or two however big the group, not the whole group sorted (an ORDER BY
    finished_at DESC NULLS LAST, id DESC did: ~150 ms a group of 3,334 at 1,000,000 jobs,
    BENCHMARKS.md); and the sample is the newest finish, the highest id among jobs that
    finished at that same instant."""
    import psycopg

    with errands.Queue(pg_url) as q:
        t = q.clock()
        ids = [
            run_job(q, "t", run_at=t - 100, started=t - 90, finished=f, outcome="failed")
            for f in (t - 50, t - 10, t - 10, t - 30)
        ]
        q.enqueue_many([("t", {"n": n}) for n in range(2000)])
        with psycopg.connect(pg_url, autocommit=True) as pg:
            # An old, big group: finished long before the four above (its rows as a bulk
            # load would leave them), then the statistics autovacuum would gather.
            pg.execute(
                "UPDATE jobs SET status = 'failed', attempts = 1, error_code = 'APP:BROKEN', "
                "finished_at = to_timestamp(%s - 3600 - id) WHERE status = 'queued'",
                (t,),
            )
            pg.execute("ANALYZE jobs")
        backend: Any = q.backend
        params = {"error_code": "APP:BROKEN", "type": "t"}
        with backend._write("plan") as conn:
            sql = "EXPLAIN (ANALYZE, FORMAT JSON) " + backend.q["error_sample"]
            (explained,) = conn.raw.execute(sql.encode(), params).fetchone()
        if isinstance(explained, str):  # errands reads json as text
            explained = json.loads(explained)
        nodes, read = [explained[0]["Plan"]], []
        while nodes:
            node = nodes.pop()
            nodes += node.get("Plans", [])
            if node.get("Relation Name") == "jobs" or "Index Name" in node:
                read.append(node["Actual Rows"] * node["Actual Loops"])
        assert read and max(read) <= 2, json.dumps(explained)
        (sample,) = backend._fetch("error_sample", params)
        assert sample["id"] == ids[2]
