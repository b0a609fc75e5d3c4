"""The figures ``stats`` reads (``job_counts``, ``job_stats_minutely``, ``job_errors_minutely``)
equal a recount from the rows after every errands write path — the worker's batches, cancel,
rescue, retry, prune, ``complete_in`` — each counting in its own transaction (no triggers since
migration 0004). An UPDATE of the application's own is not seen: the figures then differ from
the rows until ``Queue.recount_figures`` (docs/operations.md) rebuilds them."""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import errands
from errands.backends import sql
from errands.backends.base import (
    Cancelled,
    ClaimedJob,
    ClaimRequest,
    Failed,
    NewJob,
    Outcome,
    Released,
    Retried,
    Succeeded,
)
from errands.backends.host import iso
from errands.core import rollup
from helpers.ops import DAY, HOUR, assert_figures_equal_a_recount, claim, enqueue
from helpers.support import EPOCH, FixedClock, is_postgres, sql_rows, wait_for


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
            assert q.backend.complete_in(pg, out, "w1", EPOCH - 20)
            pg.commit()
        return
    conn = sqlite3.connect(url, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        assert q.backend.complete_in(conn, out, "w1", EPOCH - 20)
        conn.execute("COMMIT")
    finally:
        conn.close()


def test_every_path_keeps_the_figures_equal_to_a_recount(db_url: str, clock: FixedClock) -> None:
    with errands.Queue(db_url, clock=clock, retention={"succeeded": 60, "cancelled": 60}) as q:
        b = q.backend
        # The worker's batch: every kind of outcome in one transaction, in two queues.
        jobs = [NewJob("batch", "{}", queue, 0, EPOCH - 500, 2) for queue in ("a", "b") * 5]
        b.enqueue(jobs, EPOCH - 600, actor="api")
        held = b.claim(ClaimRequest("w1", ["batch"], None, 10, 9999), EPOCH - 400)
        kinds: list[Outcome] = [
            Succeeded(held[0].id, held[0].attempt, EPOCH - 399, None),
            Succeeded(held[1].id, held[1].attempt, EPOCH - 398.5, None),
            Failed(held[2].id, held[2].attempt, EPOCH - 390, "APP:BROKEN", "x", None),
            Retried(held[3].id, held[3].attempt, EPOCH - 395, "RETRY:ME", "x", None, EPOCH - 300),
            Cancelled(held[4].id, held[4].attempt, EPOCH - 380),
        ]
        assert b.finish(kinds, "w1", EPOCH - 370) == [True] * len(kinds)
        rest = [Succeeded(j.id, j.attempt, EPOCH - 100 - j.id, None) for j in held[5:]]
        assert b.finish(rest, "w1", EPOCH - 50) == [True] * len(rest)
        # Cancel before it starts; a lease that lapses (attempts left, and none left).
        b.cancel([enqueue(q, "cancelled", at=EPOCH - 300)], "api", EPOCH - 290)
        enqueue(q, "lost", at=EPOCH - 1000)
        claim(q, "lost", at=EPOCH - 900, lease=60)
        enqueue(q, "lost_last", at=EPOCH - 1000, max_attempts=1)
        claim(q, "lost_last", at=EPOCH - 900, lease=60)
        report = b.rescue(EPOCH - 700)
        assert len(report.recovered) == 1 and len(report.exhausted) == 1
        # Transactional completion in the application's own transaction.
        enqueue(q, "in_txn", at=EPOCH - 100)
        j = claim(q, "in_txn", at=EPOCH - 90)
        _complete_in_own_transaction(db_url, q, Succeeded(j.id, j.attempt, EPOCH - 85, None))
        assert q.stats()["counts"]["failed"] == 2  # the batch's, the lapsed lease's
        assert_figures_equal_a_recount(db_url)
        _assert_top_errors_equal_the_rows(q, db_url)

        # The application's own UPDATEs: a running job failed by hand, a queued one cancelled.
        # errands does not see them; the documented recount puts the figures right.
        enqueue(q, "by_hand", at=EPOCH - 100)
        by_hand = claim(q, "by_hand", at=EPOCH - 80)
        _execute(
            db_url,
            f"UPDATE jobs SET status = 'failed', finished_at = {_at(db_url, EPOCH - 10)} "
            f"WHERE id = {by_hand.id}",
        )
        queued = enqueue(q, "by_hand_queued", at=EPOCH - 100)
        _execute(
            db_url,
            f"UPDATE jobs SET status = 'cancelled', finished_at = {_at(db_url, EPOCH - 5)} "
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
    since = rollup.minute_of(EPOCH - DAY)
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


TYPES = ("t0", "t1", "t2")
QUEUES = ("a", "b", "c")
# Waits and runs of exactly a bucket's bound (exact in float seconds and in microseconds):
# the bucket is the number of bounds *below* the value.
ON_BOUNDS = (0.0, 0.005, 1.0, 60.0, 86400.0)


def _start(rnd: random.Random, job: ClaimedJob, now: float, fin: float) -> float:
    """When the worker says an attempt started: mostly between claim and outcome, sometimes
    exactly a bound after run_at, before run_at (no wait), or after the outcome (no run)."""
    pick = rnd.random()
    if pick < 0.15:
        return job.run_at + rnd.choice(ON_BOUNDS)
    if pick < 0.25:
        return job.run_at - rnd.uniform(0, 50)
    if pick < 0.3:
        return fin + rnd.uniform(0, 5)
    return rnd.uniform(now, fin)


def _outcomes(
    rnd: random.Random, held: list[ClaimedJob], now: float, fin: float
) -> tuple[list[Outcome], list[ClaimedJob]]:
    """One outcome of a random kind per held job, plus fenced-off ones (another attempt's),
    each with the claimed job it is for, shuffled."""
    pairs: list[tuple[Outcome, ClaimedJob]] = []
    for j in held:
        started, kind = _start(rnd, j, now, fin), rnd.random()
        o: Outcome
        if kind < 0.45:
            o = Succeeded(j.id, j.attempt, started, None)
        elif kind < 0.6:
            o = Failed(j.id, j.attempt, started, rnd.choice(("APP:A", "APP:B")), "x", None)
        elif kind < 0.75:  # due again at once, or much later
            due = rnd.choice((fin - 1, fin + 10 * DAY))
            o = Retried(j.id, j.attempt, started, "RETRY:ME", "x", None, due)
        elif kind < 0.85:
            o = Cancelled(j.id, j.attempt, started)
        elif kind < 0.92:
            o = Released(j.id, j.attempt)
        else:  # left running for another batch
            continue
        pairs.append((o, j))
        if rnd.random() < 0.1:  # a stale outcome: refused by the fence
            pairs.append((Failed(j.id, j.attempt + 1, started, "APP:STALE", "x", None), j))
    rnd.shuffle(pairs)
    return [o for o, _ in pairs], [j for _, j in pairs]


def _figure_tables(url: str) -> tuple[list[Any], list[Any], list[Any]]:
    """The three figure tables, every shard summed, in key order."""
    counts = sql_rows(
        url,
        "SELECT status, queue, type, SUM(n) FROM job_counts GROUP BY status, queue, type "
        "HAVING SUM(n) <> 0 ORDER BY 1, 2, 3",
    )
    minutes = sql_rows(
        url,
        "SELECT measure, minute, queue, bucket, SUM(count), SUM(total), MAX(maximum) "
        "FROM job_stats_minutely GROUP BY measure, minute, queue, bucket ORDER BY 1, 2, 3, 4",
    )
    errors = sql_rows(
        url,
        "SELECT minute, error_code, type, SUM(count), MAX(last_finished_at) "
        "FROM job_errors_minutely GROUP BY minute, error_code, type HAVING SUM(count) <> 0 "
        "ORDER BY 1, 2, 3",
    )
    return counts, minutes, errors


@pytest.mark.parametrize("seed", [12, 14])
def test_the_worker_path_counts_what_a_recount_reads(
    db_url: str, clock: FixedClock, seed: int
) -> None:
    # The worker hands its claimed jobs with its outcomes (Recorder.write), and the batch's
    # figures are grouped in Python (figures.count_held) instead of read back from the rows.
    # A random mix through that path must leave the tables a recount from the rows
    # (Queue.recount_figures, the SQL reference) builds: the same keys, counts and maxima,
    # totals to within float addition order.
    rnd = random.Random(seed)
    with errands.Queue(db_url, clock=clock) as q:
        b = q.backend
        now = EPOCH - 3 * HOUR
        jobs = [
            NewJob(rnd.choice(TYPES), "{}", rnd.choice(QUEUES), 0, now - rnd.uniform(0, 900), 3)
            for _ in range(500)
        ]
        jobs += [NewJob("t0", "{}", "a", 0, now + 0.25, 1) for _ in range(20)]  # due later
        b.enqueue(jobs, now - 1000, actor="api")
        # Lost leases: rescued, then their worker's outcomes arrive and are refused.
        lost = b.claim(ClaimRequest("w2", list(TYPES), None, 5, 1.0), now)
        b.rescue(now + 2)
        pool: list[ClaimedJob] = []
        for n in range(60):
            # Some batches end a hair before a minute (PostgreSQL rounds that microsecond up).
            now += rnd.uniform(1, 200) if n % 7 else 60 - (now % 60) - 4e-7
            pool += b.claim(ClaimRequest("w1", list(TYPES), None, rnd.randint(1, 25), 9999), now)
            fin = now + rnd.choice((0.0, rnd.uniform(0, 90)))
            k = rnd.randint(0, len(pool))
            done, pool = pool[:k], pool[k:]
            outcomes, held = _outcomes(rnd, done, now, fin)
            ended = {o.job_id for o in outcomes}
            pool += [j for j in done if j.id not in ended]  # left running
            if n == 5:  # the lost leases' late outcomes, fenced off
                outcomes += [Succeeded(j.id, j.attempt, now, None) for j in lost]
                held += lost
            if n % 3:
                request = ClaimRequest("w1", list(TYPES), None, rnd.randint(0, 10), 9999)
                _, claimed = b.finish_and_claim(outcomes, "w1", request, fin, held)
                pool += claimed
            else:
                b.finish(outcomes, "w1", fin, held)
        # A success twice in one batch, and claims given out of order: both counted from the
        # rows instead (each job once; no claim to group from).
        b.enqueue([NewJob("t1", "{}", "b", 0, now, 3) for _ in range(4)], now, actor="api")
        pool = b.claim(ClaimRequest("w1", ["t1"], ["b"], 4, 9999), now)
        twice = [Succeeded(j.id, j.attempt, now, None) for j in pool[:2] for _ in (1, 2)]
        assert b.finish(twice, "w1", now + 1, [j for j in pool[:2] for _ in (1, 2)]) == [True] * 4
        swapped = [Failed(j.id, j.attempt, now, "APP:A", "x", None) for j in pool[2:4]]
        assert b.finish(swapped, "w1", now + 2, pool[2:4][::-1]) == [True] * len(swapped)

        kept = _figure_tables(db_url)
        q.recount_figures()
        counts, minutes, errors = _figure_tables(db_url)
    assert kept[0] == counts and len(counts) > 20
    assert kept[2] == errors and len(errors) > 10
    assert [m[:5] for m in kept[1]] == [m[:5] for m in minutes] and len(minutes) > 200
    for got, want in zip(kept[1], minutes, strict=True):
        assert got[6] == want[6], (got, want)  # the maximum is one of the values: exact
        assert got[5] == pytest.approx(want[5], rel=1e-12, abs=1e-9), (got, want)
    assert {m[0] for m in minutes} == {"succeeded", "failed", "cancelled", "wait", "run"}
    assert {m[3] for m in minutes if m[0] == "wait"} >= {0, 7, 12, 20}  # values on bounds


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
    cmd = [sys.executable, "-m", "errands", "worker", "--app", "errands.cli.bench.app:q"]
    cmd += ["--concurrency", "8", "--quiet"]
    with open(log, "wb") as out:
        return subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)


def test_a_worker_killed_mid_run_leaves_the_figures_equal_to_the_rows(
    db_url: str, tmp_path: Path
) -> None:
    with errands.Queue(db_url) as q:
        q.enqueue_many([("noop", {"i": i}) for i in range(5000)])
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
            lambda: sql_rows(db_url, done)[0][0] == 5000, timeout=120, what="the queue to drain"
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    assert_figures_equal_a_recount(db_url)


def test_the_batch_counts_read_its_rows_by_primary_key(sqlite_path: str) -> None:
    # SQLite's side of tests/backends/test_postgres_plans.py: a range of a status index (every
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
        # The worker's batch: grouped rows upserted, no table read at all.
        for name in ("count_grouped_jobs", "count_grouped_minutes", "count_grouped_errors"):
            query = sql.queries("sqlite")[name]
            params2 = {"rows": "[]", "now": EPOCH}
            steps = [r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + query, params2)]
            assert not any(" job" in f" {s}" for s in steps), steps
    finally:
        conn.close()


def test_the_durable_counts_read_the_steps_indexes_not_the_queued_jobs(sqlite_path: str) -> None:
    # stats and the overview count sleeping and parked jobs: from job_steps' partial indexes,
    # each job then found by key. On a table of few steps, SQLite's own choice was to walk every
    # queued job and look up its steps (80 ms a view at 100,000 queued).
    with errands.Queue(sqlite_path) as q:
        q.enqueue_many([("noop", {"i": i}) for i in range(200)])
    conn = sqlite3.connect(sqlite_path)
    try:
        conn.execute("ANALYZE")  # statistics that say: many queued jobs, no steps
        params = {"now": EPOCH, "grace": 60, "queued": "queued", "waiting": "waiting"}
        query = sql.queries("sqlite")["durable_counts"]
        steps = [r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + query, params)]
        assert not any(s.startswith("SCAN j") for s in steps), steps
        assert any("job_steps_sleeps" in s for s in steps), steps
        assert any("job_steps_open_waits" in s for s in steps), steps
    finally:
        conn.close()
