"""``q.stats()``: each of the five questions against a database built to known contents."""

from __future__ import annotations

import pytest

import errands
from ops_helpers import (
    DAY,
    HOUR,
    T0,
    Clock,
    claim,
    enqueue,
    register_worker,
    run_job,
    sql_rows,
    sqlite_only,
)

pytest_plugins = ("conftest_ops",)


def test_counts_every_state_and_by_queue_type(q: errands.Queue) -> None:
    run_job(q, "a", run_at=T0 - 100, started=T0 - 90, finished=T0 - 80)
    run_job(q, "b", run_at=T0 - 100, started=T0 - 90, finished=T0 - 80, outcome="failed")
    enqueue(q, "a", at=T0 - 10, queue="mail")
    enqueue(q, "a", at=T0 - 10, queue="mail")
    st = q.stats()
    assert st["counts"] == {"queued": 2, "running": 0, "succeeded": 1, "failed": 1, "cancelled": 0}
    assert st["by_queue_type"] == [
        {"status": "failed", "queue": "default", "type": "b", "count": 1},
        {"status": "queued", "queue": "mail", "type": "a", "count": 2},
        {"status": "succeeded", "queue": "default", "type": "a", "count": 1},
    ]


def test_counts_use_the_covering_index(q: errands.Queue) -> None:
    # "Counts stay fast": the GROUP BY is answered from jobs_status_queue_type alone.
    sqlite_only(
        q.url,
        "reads SQLite's EXPLAIN QUERY PLAN; PostgreSQL's planner picks an index-only scan only "
        "on tables large enough and vacuumed, so the same plan cannot be asserted on a test table",
    )
    query = "EXPLAIN QUERY PLAN " + q.backend.q["count_by_state"]  # type: ignore[attr-defined]
    plan = " ".join(str(r[3]) for r in sql_rows(q.url, query))
    assert "COVERING INDEX jobs_status_queue_type" in plan


def test_oldest_running_with_worker_liveness(q: errands.Queue, clock: Clock) -> None:
    register_worker(q, "alive", at=T0 - 5, types=["slow", "quiet"])
    register_worker(q, "dead", at=T0 - 600, types=["slow"])
    enqueue(q, "slow", at=T0 - 500)
    claim(q, "slow", at=T0 - 400, worker="dead", lease=60)  # lease expired at T0-340
    enqueue(q, "quiet", at=T0 - 500)
    j = claim(q, "quiet", at=T0 - 450, worker="alive", lease=60)
    assert q.backend.heartbeat("alive", [(j.id, j.attempt)], 60, T0 - 30) == [True]
    st = q.stats()
    first, second = st["oldest_running"]
    assert (first["type"], first["worker_id"], first["age_seconds"]) == ("slow", "dead", 400.0)
    assert first["worker_alive"] is False and first["past_lease"] is True
    # quiet started earlier but heartbeat since: COALESCE(heartbeat_at, started_at) orders it.
    assert (second["type"], second["worker_id"], second["age_seconds"]) == ("quiet", "alive", 30.0)
    assert second["worker_alive"] is True and second["past_lease"] is False
    assert [w["id"] for w in st["workers"]] == ["alive"]
    assert st["workers"][0]["types"] == ["slow", "quiet"]


def test_oldest_due_wait(q: errands.Queue) -> None:
    enqueue(q, "a", at=T0 - 1000, run_at=T0 + 100)  # not due yet
    late = enqueue(q, "b", at=T0 - 1000, run_at=T0 - 250)
    enqueue(q, "c", at=T0 - 1000, run_at=T0 - 50)
    due = q.stats()["oldest_due"]
    assert due["id"] == late and due["wait_seconds"] == 250.0 and due["type"] == "b"


def test_no_due_job(q: errands.Queue) -> None:
    enqueue(q, "a", at=T0, run_at=T0 + 10)
    assert q.stats()["oldest_due"] is None


def test_retry_distribution_in_window(q: errands.Queue) -> None:
    run_job(q, "a", run_at=T0 - 100, started=T0 - 90, finished=T0 - 80)
    run_job(q, "b", run_at=T0 - 100, started=T0 - 90, finished=T0 - 80, failures_first=1)
    run_job(q, "c", run_at=T0 - 100, started=T0 - 90, finished=T0 - 80, failures_first=2)
    run_job(q, "d", run_at=T0 - 100, started=T0 - 90, finished=T0 - 80, failures_first=2)
    run_job(q, "old", run_at=T0 - 2 * DAY, started=T0 - 2 * DAY, finished=T0 - 2 * DAY + 1)
    st = q.stats()
    assert st["retries"]["histogram"] == {"1": 1, "2": 1, "3": 2}
    assert q.stats(window=3 * DAY)["retries"]["histogram"] == {"1": 2, "2": 1, "3": 2}


def test_top_error_codes_with_type_and_last_seen(q: errands.Queue) -> None:
    for i in range(3):
        run_job(
            q, "mail", run_at=T0 - 100, started=T0 - 90, finished=T0 - 80 + i,
            outcome="failed", error_code="SMTP:REJECTED",
        )  # fmt: skip
    run_job(
        q, "pay", run_at=T0 - 100, started=T0 - 90, finished=T0 - 70,
        outcome="failed", error_code="HTTP:502",
    )  # fmt: skip
    run_job(
        q, "pay", run_at=T0 - 3 * DAY, started=T0 - 3 * DAY, finished=T0 - 3 * DAY,
        outcome="failed", error_code="OLD:ONE",
    )  # fmt: skip
    errs = q.stats()["top_errors"]
    assert [(e["error_code"], e["type"], e["count"]) for e in errs] == [
        ("SMTP:REJECTED", "mail", 3),
        ("HTTP:502", "pay", 1),
    ]
    assert errs[0]["last_seen"].startswith("2027-01-15T07:58:42")
    assert q.errors(top=1) == errs[:1]
    assert [e["error_code"] for e in q.errors(since=4 * DAY)][-1] == "OLD:ONE"


def test_last_hour_throughput_and_percentiles(q: errands.Queue) -> None:
    # 20 jobs finished in the last hour: wait i seconds, run 2*i seconds, i = 1..20.
    for i in range(1, 21):
        start = T0 - 1800 + i * 10
        run_job(q, f"t{i}", run_at=start - i, started=start, finished=start + 2 * i)
    run_job(q, "x", run_at=T0 - 1000, started=T0 - 990, finished=T0 - 900, outcome="failed")
    run_job(q, "old", run_at=T0 - 2 * HOUR, started=T0 - 2 * HOUR, finished=T0 - 2 * HOUR + 5)
    hour = q.stats()["last_hour"]
    assert hour["processed"] == 21 and hour["succeeded"] == 20 and hour["failed"] == 1
    assert hour["per_minute"] == pytest.approx(21 / 60, abs=1e-3)
    assert hour["failure_rate"] == pytest.approx(1 / 21, abs=1e-4)
    # nearest rank over 21 values: waits 1..20 plus 10 (x); runs 2..40 plus 90
    assert hour["wait_p50"] == 10.0 and hour["wait_p95"] == 19.0
    assert hour["run_p50"] == 22.0 and hour["run_p95"] == 40.0


def test_last_hour_includes_rolled_up_rows(db_url: str, clock: Clock) -> None:
    # Retention of 10 minutes: rows finished 30 minutes ago are pruned into the rollup,
    # and the last-hour figures still count them.
    with errands.Queue(db_url, clock=clock, retention={"succeeded": 600}) as q:
        for i in range(5):
            run_job(q, "a", run_at=T0 - 1800, started=T0 - 1800 + i, finished=T0 - 1790 + i)
        before = q.stats()["last_hour"]
        assert q.prune().total == 5
        after = q.stats()["last_hour"]
        assert after["processed"] == before["processed"] == 5
        assert after["succeeded"] == 5
        assert after["wait_p95"] is not None and after["wait_p95"] >= before["wait_p95"]


def test_queued_types_no_live_worker_handles(q: errands.Queue) -> None:
    register_worker(q, "w-a", at=T0 - 1, types=["a"], queues=["default"])
    register_worker(q, "w-gone", at=T0 - 1000, types=["b"])
    enqueue(q, "a", at=T0)
    enqueue(q, "a", at=T0, queue="other")  # a, but on a queue w-a does not listen to
    enqueue(q, "b", at=T0)  # only a dead worker handled b
    unhandled = q.stats()["unhandled_types"]
    assert unhandled == [
        {"queue": "default", "type": "b", "queued": 1},
        {"queue": "other", "type": "a", "queued": 1},
    ]
    q.backend.worker_stopped("w-a", T0)
    assert len(q.stats()["unhandled_types"]) == 3


def test_overdue_periodic_in_stats(q: errands.Queue, clock: Clock) -> None:
    clock.now = T0 - 10 * HOUR

    @q.periodic(every=HOUR, grace=60)
    def hourly() -> None: ...

    clock.now = T0
    assert [o["name"] for o in q.stats()["periodic_overdue"]] == ["hourly"]
