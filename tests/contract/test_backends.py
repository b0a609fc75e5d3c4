"""The Queue's behaviour, run on both backends (``db_url``): whatever a user sees on SQLite
they see on PostgreSQL. Time is driven through ``clock=`` where it matters."""

from __future__ import annotations

import sqlite3
from datetime import UTC
from typing import Any

import pytest

import errands
from errands.backends.base import ClaimRequest, Succeeded
from errands.errors import ConfigurationError, SchemaVersionError
from helpers.support import FixedClock, is_postgres


def claim(q: errands.Queue, limit: int = 10, lease: float = 60.0) -> list[Any]:
    request = ClaimRequest("w1", sorted(q.tasks) or ["t"], None, limit, lease)
    return q.backend.claim(request, q.clock())


def test_round_trip_keeps_payload_result_and_utc_times(db_url: str) -> None:
    with errands.Queue(db_url) as q:

        @q.task
        def greet(name: str, tags: list[str]) -> str:
            return f"hi {name}"  # a bare JSON string: must come back as a str, not decoded twice

        job_id = greet.enqueue(name="ann", tags=["a", "ü"])
        q.run_worker(burst=True, handle_signals=False)
        job = q.get(job_id)
        assert job is not None
        assert job.status == "succeeded"
        assert job.payload == {"name": "ann", "tags": ["a", "ü"]}
        assert job.result == "hi ann"
        assert job.created_at is not None and job.created_at.tzinfo == UTC
        assert [e.event for e in q.events(job_id)] == ["ENQUEUED", "CLAIMED", "SUCCEEDED"]
        assert [a.status for a in q.attempts(job_id)] == ["succeeded"]


def test_unique_key_dedups_only_active_jobs(db_url: str) -> None:
    with errands.Queue(db_url) as q:
        first = q.enqueue("t", {}, unique_key="k")
        assert q.enqueue("t", {}, unique_key="k") == first
        q.cancel(first)
        assert q.enqueue("t", {}, unique_key="k") != first


def test_claim_orders_by_priority_then_run_at_then_id(db_url: str) -> None:
    clock = FixedClock()
    with errands.Queue(db_url, clock=clock) as q:
        low = q.enqueue("t", {}, priority=0)
        high = q.enqueue("t", {}, priority=5)
        later = q.enqueue("t", {}, priority=9, delay=60)
        assert [j.id for j in claim(q)] == [high, low]
        clock.now += 61
        assert [j.id for j in claim(q)] == [later]


def test_enqueue_many_bulk_and_unique_paths(db_url: str) -> None:
    with errands.Queue(db_url) as q:
        bulk = q.enqueue_many([("t", {"n": n}) for n in range(500)])
        assert bulk == sorted(bulk) and len(set(bulk)) == 500
        mixed = q.enqueue_many([("t", {"n": n}, {"unique_key": f"u{n % 3}"}) for n in range(9)])
        assert len(set(mixed)) == 3 and mixed[:3] == mixed[3:6]
        job = q.get(bulk[123])
        assert job is not None and job.payload == {"n": 123} and job.status == "queued"
        assert [e.event for e in q.events(bulk[-1])] == ["ENQUEUED"]
        assert q.stats()["counts"]["queued"] == 503


def test_retry_then_final_failure_timeline(db_url: str) -> None:
    clock = FixedClock()
    with errands.Queue(db_url, clock=clock) as q:

        @q.task(max_attempts=2, backoff=errands.fixed(10))
        def flaky() -> None:
            raise errands.JobError("SMTP:REJECTED", "no")

        job_id = flaky.enqueue()
        q.run_worker(burst=True, handle_signals=False)
        clock.now += 11
        q.run_worker(burst=True, handle_signals=False)
        job = q.get(job_id)
        assert job is not None and job.status == "failed" and job.error_code == "SMTP:REJECTED"
        assert [e.event for e in q.events(job_id)] == [
            "ENQUEUED",
            "CLAIMED",
            "RETRY_SCHEDULED",
            "CLAIMED",
            "FAILED",
        ]
        assert [a.attempt for a in q.attempts(job_id)] == [1, 2]
        q.retry(job_id)
        job = q.get(job_id)
        assert job is not None and job.status == "queued" and job.max_attempts == 3


def test_expired_lease_is_recovered_and_stale_outcome_refused(db_url: str) -> None:
    clock = FixedClock()
    with errands.Queue(db_url, clock=clock) as q:
        job_id = q.enqueue("t", {})
        (held,) = claim(q, lease=5)
        clock.now += 6
        report = q.backend.rescue(clock.now)
        assert report.recovered == [job_id]
        stale = Succeeded(job_id, held.attempt, held.created_at, None)
        assert q.backend.finish([stale], "w1", clock.now) == [False]
        (again,) = claim(q)
        assert again.attempt == 2
        assert [a.status for a in q.attempts(job_id)] == ["lost", "running"]
        assert "RECOVERED" in [e.event for e in q.events(job_id)]


def test_list_jobs_filters_and_pages(db_url: str) -> None:
    with errands.Queue(db_url) as q:
        ids = [q.enqueue("t", {}, queue="a" if n % 2 else "b") for n in range(6)]
        q.cancel(ids[0])
        assert [j.id for j in q.jobs(queue="a")] == [ids[5], ids[3], ids[1]]
        assert [j.id for j in q.jobs(status="cancelled")] == [ids[0]]
        assert [j.id for j in q.jobs(limit=2, before_id=ids[3])] == [ids[2], ids[1]]


def test_transactional_enqueue_commits_or_rolls_back_with_the_app(db_url: str) -> None:
    with errands.Queue(db_url) as q:
        if is_postgres(db_url):
            import psycopg

            with psycopg.connect(db_url) as conn:
                kept = q.enqueue("t", {}, connection=conn)
                conn.commit()
                dropped = q.enqueue("t", {}, connection=conn)
                conn.rollback()
            with psycopg.connect(db_url, autocommit=True) as auto:
                with pytest.raises(ConfigurationError, match="autocommit"):
                    q.enqueue("t", {}, connection=auto)
        else:
            lite = sqlite3.connect(db_url)
            try:
                kept = q.enqueue("t", {}, connection=lite)
                lite.commit()
                dropped = q.enqueue("t", {}, connection=lite)
                lite.rollback()
            finally:
                lite.close()
        assert q.get(kept) is not None
        assert q.get(dropped) is None


def test_a_newer_schema_is_refused(db_url: str) -> None:
    with errands.Queue(db_url) as q:
        with q.backend._write("test") as conn:  # type: ignore[attr-defined]
            conn.execute(
                q.backend.q["record_migration"],  # type: ignore[attr-defined]
                {"version": 99, "now": 0.0},
            )
    with pytest.raises(SchemaVersionError, match="newer than this errands"):
        errands.Queue(db_url)
