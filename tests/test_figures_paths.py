"""The figures ``stats`` reads (``job_counts``, ``job_stats_minutely``, ``job_errors_minutely``)
equal a recount from the rows after every errands write path — the worker's batches, cancel,
rescue, retry, prune, ``complete_in`` — each counting in its own transaction (no triggers since
migration 0004). An UPDATE of the application's own is not seen: the figures then differ from
the rows until ``Queue.recount_figures`` (docs/operations.md) rebuilds them."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

import errands
from errands import rollup
from errands.backends import sql
from errands.backends.base import (
    Cancelled,
    ClaimRequest,
    Failed,
    NewJob,
    Outcome,
    Retried,
    Succeeded,
)
from errands.backends.host import iso
from ops_helpers import (
    DAY,
    T0,
    Clock,
    assert_figures_equal_a_recount,
    claim,
    enqueue,
    is_postgres,
    sql_rows,
)
from support import wait_for

pytest_plugins = ("conftest_ops",)


def _execute(url: str, statement: str) -> None:
    """One statement, committed, on a connection of the application's (not errands')."""
    if is_postgres(url):
        import psycopg

        with psycopg.connect(url, autocommit=True) as pg:
            pg.execute(statement.encode())
        return
    conn = sqlite3.connect(url, isolation_level=None)
    try:
        conn.execute(statement)
    finally:
        conn.close()


def _at(url: str, epoch: float) -> str:
    return f"to_timestamp({epoch})" if is_postgres(url) else repr(epoch)


def _complete_in_own_transaction(url: str, q: errands.Queue, out: Succeeded) -> None:
    if is_postgres(url):
        import psycopg

        with psycopg.connect(url) as pg:
            assert q.backend.complete_in(pg, out, "w1", T0 - 20)
            pg.commit()
        return
    conn = sqlite3.connect(url, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        assert q.backend.complete_in(conn, out, "w1", T0 - 20)
        conn.execute("COMMIT")
    finally:
        conn.close()


def test_every_path_keeps_the_figures_equal_to_a_recount(db_url: str, clock: Clock) -> None:
    with errands.Queue(db_url, clock=clock, retention={"succeeded": 60, "cancelled": 60}) as q:
        b = q.backend
        # The worker's batch: every kind of outcome in one transaction, in two queues.
        jobs = [NewJob("batch", "{}", queue, 0, T0 - 500, 2) for queue in ("a", "b") * 5]
        b.enqueue(jobs, T0 - 600, actor="api")
        held = b.claim(ClaimRequest("w1", ["batch"], None, 10, 9999), T0 - 400)
        kinds: list[Outcome] = [
            Succeeded(held[0].id, held[0].attempt, T0 - 399, None),
            Succeeded(held[1].id, held[1].attempt, T0 - 398.5, None),
            Failed(held[2].id, held[2].attempt, T0 - 390, "APP:BROKEN", "x", None),
            Retried(held[3].id, held[3].attempt, T0 - 395, "RETRY:ME", "x", None, T0 - 300),
            Cancelled(held[4].id, held[4].attempt, T0 - 380),
        ]
        assert b.finish(kinds, "w1", T0 - 370) == [True] * len(kinds)
        rest = [Succeeded(j.id, j.attempt, T0 - 100 - j.id, None) for j in held[5:]]
        assert b.finish(rest, "w1", T0 - 50) == [True] * len(rest)
        # Cancel before it starts; a lease that lapses (attempts left, and none left).
        b.cancel([enqueue(q, "cancelled", at=T0 - 300)], "api", T0 - 290)
        enqueue(q, "lost", at=T0 - 1000)
        claim(q, "lost", at=T0 - 900, lease=60)
        enqueue(q, "lost_last", at=T0 - 1000, max_attempts=1)
        claim(q, "lost_last", at=T0 - 900, lease=60)
        report = b.rescue(T0 - 700)
        assert len(report.recovered) == 1 and len(report.exhausted) == 1
        # Transactional completion in the application's own transaction.
        enqueue(q, "in_txn", at=T0 - 100)
        j = claim(q, "in_txn", at=T0 - 90)
        _complete_in_own_transaction(db_url, q, Succeeded(j.id, j.attempt, T0 - 85, None))
        assert q.stats()["counts"]["failed"] == 2  # the batch's, the lapsed lease's
        assert_figures_equal_a_recount(db_url)
        _assert_top_errors_equal_the_rows(q, db_url)

        # The application's own UPDATEs: a running job failed by hand, a queued one cancelled.
        # errands does not see them; the documented recount puts the figures right.
        enqueue(q, "by_hand", at=T0 - 100)
        by_hand = claim(q, "by_hand", at=T0 - 80)
        _execute(
            db_url,
            f"UPDATE jobs SET status = 'failed', finished_at = {_at(db_url, T0 - 10)} "
            f"WHERE id = {by_hand.id}",
        )
        queued = enqueue(q, "by_hand_queued", at=T0 - 100)
        _execute(
            db_url,
            f"UPDATE jobs SET status = 'cancelled', finished_at = {_at(db_url, T0 - 5)} "
            f"WHERE id = {queued}",
        )
        assert q.stats()["counts"]["failed"] == 2  # not seen
        with pytest.raises(AssertionError):
            assert_figures_equal_a_recount(db_url)
        q.recount_figures()
        assert q.stats()["counts"]["failed"] == 3  # the batch's, the lapsed lease's, by hand
        assert_figures_equal_a_recount(db_url)
        _assert_top_errors_equal_the_rows(q, db_url)

        # A manual retry and a prune take jobs out of their final state: the counts follow
        # (the minute figures keep what happened, so only the counts equal a recount).
        q.retry(held[2].id)
        assert q.stats()["counts"]["failed"] == 2
        assert q.prune().total > 0
        assert_figures_equal_a_recount(db_url, minutes_too=False)
        # The retried job's error now counts as waiting (no last_seen), the pruned ones none.
        _assert_top_errors_equal_the_rows(q, db_url)


def _assert_top_errors_equal_the_rows(q: errands.Queue, url: str) -> None:
    since = rollup.minute_of(T0 - DAY)
    exact = sql_rows(
        url,
        "SELECT error_code, type, COUNT(*) AS n, MAX(finished_at) FROM jobs "
        f"WHERE error_code IS NOT NULL AND (finished_at >= {_at(url, since)} "
        "OR finished_at IS NULL) GROUP BY error_code, type ORDER BY n DESC, error_code, type",
    )
    assert len(exact) >= 3
    got = q.errors(top=1000, since=DAY)
    assert [(e["error_code"], e["type"], e["count"], e["last_seen"]) for e in got] == [
        (code, jtype, n, iso(last)) for code, jtype, n, last in exact
    ]


def _app(url: str) -> errands.Queue:
    q = errands.Queue(url)

    @q.task
    def ok(n: int = 0) -> int:
        return n

    @q.task(max_attempts=1)
    def broken(n: int = 0) -> None:
        raise ValueError(f"broken {n}")

    return q


def test_a_worker_run_counts_each_job_once(db_url: str) -> None:
    q = _app(db_url)
    try:
        q.enqueue_many([("ok", {"n": n}) for n in range(300)])
        q.enqueue_many([("broken", {"n": n}) for n in range(40)])
        summary = q.run_worker(concurrency=4, burst=True)
        assert (summary.succeeded, summary.failed) == (300, 40)
        assert q.stats()["counts"]["succeeded"] == 300
    finally:
        q.close()
    assert_figures_equal_a_recount(db_url)


def _bench_worker(url: str, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "ERRANDS_BENCH_DB": url}
    cmd = [sys.executable, "-m", "errands", "worker", "--app", "errands.bench_app:q"]
    cmd += ["--concurrency", "8", "--quiet"]
    with open(log, "wb") as out:
        return subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)


def test_a_worker_killed_mid_run_leaves_the_figures_equal_to_the_rows(
    db_url: str, tmp_path: Path
) -> None:
    with errands.Queue(db_url) as q:
        q.enqueue_many([("noop", {"i": i}) for i in range(20000)])
    proc = _bench_worker(db_url, tmp_path / "worker.log")
    done = "SELECT COUNT(*) FROM jobs WHERE status = 'succeeded'"
    try:
        wait_for(
            lambda: sql_rows(db_url, done)[0][0] >= 500, timeout=60, what="the worker to start"
        )
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    left = sql_rows(db_url, "SELECT COUNT(*) FROM jobs WHERE status <> 'succeeded'")[0][0]
    assert left > 0, "the worker finished before it was killed: nothing was interrupted"
    with errands.Queue(db_url) as q:
        # Its running jobs go back to the queue (what the next worker on this host does).
        dead = [r[0] for r in sql_rows(db_url, "SELECT id FROM workers")]
        q.backend.recover_workers(dead, time.time())
        assert_figures_equal_a_recount(db_url)
    proc = _bench_worker(db_url, tmp_path / "worker2.log")
    try:
        wait_for(
            lambda: sql_rows(db_url, done)[0][0] == 20000, timeout=120, what="the queue to drain"
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    assert_figures_equal_a_recount(db_url)


def test_the_batch_counts_read_its_rows_by_primary_key(sqlite_path: str) -> None:
    # SQLite's side of tests/test_postgres_plans.py: a range of a status index (every
    # finished row) would make the count grow with the table.
    errands.Queue(sqlite_path).close()
    conn = sqlite3.connect(sqlite_path)
    try:
        for name in (
            "count_batch_jobs",
            "count_batch_minutes",
            "count_batch_errors",
            "uncount_jobs",
            "uncount_job_errors",
            "prune_batch",
        ):
            query = sql.queries("sqlite")[name]
            params = {"job_ids": "[1]", "with_runs": True}
            steps = [r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + query, params)]
            on_jobs = [s for s in steps if " jobs " in f" {s} " or s.startswith("SEARCH j ")]
            assert on_jobs and all("PRIMARY KEY" in s for s in on_jobs), steps
            assert not any(s.startswith("SCAN job") for s in steps), steps
    finally:
        conn.close()
