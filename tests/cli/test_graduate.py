"""``errands graduate`` end to end: a SQLite queue with jobs in every state, attempts, events,
blobs, schedules, workers and rollups moves to PostgreSQL with equal counts and identical
timelines; an interrupted run resumes; the moved queue then runs its remaining jobs there."""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest

import errands
from errands.backends.base import ClaimRequest
from errands.cli.graduate import register
from errands.cli.graduate.copy import TABLES, GraduateError, graduate
from errands.core import faults
from errands.testing import drain
from helpers.ops import assert_figures_equal_a_recount
from helpers.support import FixedClock, first_row

EPOCH = 1_800_000_000.0


def tasks(q: errands.Queue) -> None:
    @q.task
    def ok(n: int) -> dict[str, Any]:
        return {"n": n, "text": "ü", "big": 1e20}

    @q.task
    def bad() -> None:
        raise errands.JobError("BAD:INPUT", "never works", retry=False)

    @q.task(max_attempts=3, backoff=errands.fixed(30))
    def flaky() -> None:
        raise ValueError("try later")

    @q.task
    def journey(ctx: errands.JobContext, n: int) -> Any:
        """Durable steps (docs/durable-steps.md): 1 sleeps, 2 waits for a signal."""
        ctx.step("first", lambda: n)
        if n == 1:
            ctx.sleep(1800)
        return ctx.wait_for("go")


def build_source(path: str) -> FixedClock:
    """Jobs in every state, with attempts, events, a traceback blob, a dependency, a worker
    row, a schedule and an hourly rollup."""
    clock = FixedClock(EPOCH)
    with errands.Queue(path, clock=clock, lease_seconds=10) as q:
        tasks(q)
        for n in range(5):
            q.enqueue("ok", {"n": n})
        q.enqueue("bad")
        q.enqueue("bad")
        q.enqueue("flaky")
        sleeping = q.enqueue("journey", {"n": 1})
        q.enqueue("journey", {"n": 2})
        q.run_worker(burst=True, handle_signals=False)  # succeeded, failed, flaky → queued later
        q.signal(sleeping, "go", {"kept": True})  # job_signals: taken once it wakes
        clock.now += 1
        q.cancel(q.enqueue("ok", {"n": 99}))  # cancelled
        q.retry(q.jobs(status="failed")[0].id)  # a manual retry in the timeline
        q.cancel(q.jobs(status="queued", type="bad")[0].id)
        for n in range(40):
            q.enqueue("ok", {"n": 100 + n}, priority=n % 3)  # queued, due
        later = q.enqueue("ok", {"n": 500}, delay=3600)  # queued, scheduled
        q.enqueue("ok", {"n": 800}, after=[later])  # waiting: its job_deps row is copied too
        q.pause("held", reason="flow control graduates too", actor="ops")  # queue_pauses
        q.set_limit("api", running=3, rate=(10, 60.0), actor="ops")  # flow_limits
        q.enqueue("ok", {"n": 600}, unique_key="only-one")
        running = q.enqueue("ok", {"n": 700}, priority=100)
        held = q.backend.claim(ClaimRequest("dead-host:1:x", ["ok"], None, 1, 10), clock.now)
        assert [j.id for j in held] == [running]  # running, its worker never comes back
    conn = sqlite3.connect(path)
    with conn:
        conn.execute(
            "INSERT INTO periodic (name, cron, type, payload, queue, next_run_at) "
            "VALUES ('nightly', '0 3 * * *', 'ok', '{\"n\": 1}', 'default', ?)",
            (EPOCH + 86400,),
        )
        conn.execute(
            "INSERT INTO periodic (name, interval_seconds, type, last_enqueued_at) "
            "VALUES ('often', 30.5, 'ok', ?)",
            (EPOCH - 0.123456,),
        )
        conn.execute(
            "INSERT INTO job_stats_hourly (hour, queue, type, outcome, count, wait_sum, "
            "wait_max, run_sum, run_max, wait_hist, run_hist) "
            "VALUES (?, 'default', 'ok', 'succeeded', 5, 0.5, 0.25, 1.5, 0.75, '[1,2,2]', '[5]')",
            (EPOCH - EPOCH % 3600,),
        )
    conn.close()
    return clock


def snapshot(url: str) -> dict[int, Any]:
    """Everything the API shows about each job: the row, attempts and timeline."""
    with errands.Queue(url) as q:
        out = {}
        before = None
        while page := q.jobs(limit=50, before_id=before):
            for job in page:
                out[job.id] = (job, q.attempts(job.id), q.events(job.id))
            before = page[-1].id
        return out


def counts(pg_url: str, path: str) -> tuple[dict[str, int], dict[str, int]]:
    lite = sqlite3.connect(path)
    try:
        a = {t: lite.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t, _ in TABLES}
    finally:
        lite.close()
    with psycopg.connect(pg_url) as conn:
        b = {
            t: first_row(conn.execute(f"SELECT count(*) FROM {t}").fetchone())[0] for t, _ in TABLES
        }
    return a, b


def test_graduate_moves_everything_and_the_queue_runs_on(tmp_path: Path, pg_url: str) -> None:
    path = str(tmp_path / "app.db")
    clock = build_source(path)
    before = snapshot(path)
    assert {j.status for j, _, _ in before.values()} == {
        "waiting",
        "queued",
        "running",
        "succeeded",
        "failed",
        "cancelled",
    }

    report = graduate(path, pg_url, batch_size=7)
    assert report.ok, report.summary()
    lite, pg = counts(pg_url, path)
    assert lite == pg and all(lite.values()), (lite, pg)
    assert snapshot(pg_url) == before  # identical rows, attempts and timelines
    # The figures stats reads are recounted on the target from the copied rows (COPY runs no
    # errands write path): the same counts as the source, equal to the rows.
    assert_figures_equal_a_recount(pg_url)
    with errands.Queue(path) as src_q, errands.Queue(pg_url) as dst_q:
        assert dst_q.stats()["counts"] == src_q.stats()["counts"]
        assert dst_q.stats()["counts"]["failed"] == 1

    with psycopg.connect(pg_url) as conn:
        assert conn.execute(
            "SELECT cron, payload FROM periodic WHERE name = 'nightly'"
        ).fetchone() == (
            "0 3 * * *",
            {"n": 1},
        )

    # The queue carries on there: new ids continue past the copied ones, the dead worker's
    # job is recovered by its lease, and every remaining due job runs.
    with errands.Queue(pg_url, clock=clock, lease_seconds=10) as q:
        tasks(q)
        assert q.enqueue("ok", {"n": 1000}) > max(before)
        clock.now += 3600 + 60  # past the lease, the scheduled job and the flaky retry's run_at
        q.run_worker(burst=True, handle_signals=False)
        jobs = q.jobs(limit=1000)
        assert {j.status for j in jobs if j.type == "ok" and j.id in before} >= {"succeeded"}
        assert not [
            j for j in jobs if j.type == "ok" and j.status in ("waiting", "queued", "running")
        ]
        (flaky,) = [j for j in jobs if j.type == "flaky"]
        assert flaky.attempts == 2  # its retry ran on PostgreSQL, the next one is not due yet
        running_id = next(i for i, (j, _, _) in before.items() if j.status == "running")
        assert [a.status for a in q.attempts(running_id)] == ["lost", "succeeded"]
        # The sleeping job woke there and took the signal it was sent on SQLite; the waiting
        # one resumes when signalled on PostgreSQL.
        slept, waiting = sorted((j for j in jobs if j.type == "journey"), key=lambda j: j.id)
        assert (slept.status, slept.result) == ("succeeded", {"kept": True})
        assert waiting.status == "waiting"
        q.signal(waiting.id, "go", "late")
        q.run_worker(burst=True, handle_signals=False)
        assert q.get(waiting.id).result == "late"  # type: ignore[union-attr]
        assert [s.name for s in q.steps(waiting.id)] == ["first", "go"]


def test_an_interrupted_graduation_resumes(tmp_path: Path, pg_url: str) -> None:
    path = str(tmp_path / "app.db")
    build_source(path)
    first = graduate(path, pg_url, batch_size=5, max_batches=4)
    assert not first.complete and not first.ok
    assert sum(t.copied for t in first.tables) == 20

    again = graduate(path, pg_url, batch_size=5)
    assert again.resumed and again.ok, again.summary()
    assert again.tables[0].skipped == 20
    lite, pg = counts(pg_url, path)
    assert lite == pg
    assert snapshot(pg_url) == snapshot(path)


def test_a_crash_mid_copy_resumes(tmp_path: Path, pg_url: str) -> None:
    path = str(tmp_path / "app.db")
    build_source(path)
    code = (
        "import sys; from errands.cli.graduate.copy import graduate; "
        "graduate(sys.argv[1], sys.argv[2], batch_size=10)"
    )
    crashed = subprocess.run(
        [sys.executable, "-c", code, path, pg_url],
        env={**os.environ, "ERRANDS_FAULT": "graduate.job_events.after_batch"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert crashed.returncode == faults.FAULT_EXIT_CODE, crashed.stderr
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT count(*) FROM job_events").fetchone() == (10,)
    report = graduate(path, pg_url, batch_size=10)
    assert report.resumed and report.ok, report.summary()
    assert snapshot(pg_url) == snapshot(path)


def test_a_non_empty_target_is_refused_unless_forced(tmp_path: Path, pg_url: str) -> None:
    path = str(tmp_path / "app.db")
    build_source(path)
    with errands.Queue(pg_url) as q:
        q.enqueue_many([("other", {}) for _ in range(100)])  # ids 1..100 collide with the source
    with pytest.raises(GraduateError, match="already has rows in jobs"):
        graduate(path, pg_url)
    forced = graduate(path, pg_url, force=True)
    # Colliding ids were kept as they were in the target: verification says so.
    assert forced.complete and not forced.ok
    assert forced.tables[0].skipped > 0


def test_cli_copies_and_reports(
    tmp_path: Path, pg_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = str(tmp_path / "app.db")
    build_source(path)
    parser = argparse.ArgumentParser(prog="errands")
    register(parser.add_subparsers())
    args = parser.parse_args(["graduate", "--to", pg_url, "--db", path, "--json"])
    assert args.func(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] and {t["name"] for t in out["tables"]} == {t for t, _ in TABLES}
    args = parser.parse_args(["graduate", "--to", "sqlite:///x.db", "--db", path])
    assert args.func(args) == 2
    capsys.readouterr()
    args = parser.parse_args(["graduate", "--to", pg_url, "--db", str(tmp_path / "none.db")])
    assert args.func(args) == 1
    err = capsys.readouterr().err
    assert err.startswith("errands: no queue database at") and "none.db" in err


def test_job_headers_graduate_with_their_jobs(tmp_path: Path, pg_url: str) -> None:
    """jobs.headers (schema 3, written by enqueue middleware) is copied like any column."""

    class Tag(errands.Middleware):
        def enqueue(self, job: errands.Enqueuing) -> None:
            job.headers["traceparent"] = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

    path = str(tmp_path / "app.db")
    with errands.Queue(path) as q:
        plain = q.enqueue("t", {})
        q.use(Tag())
        tagged = q.enqueue("t", {})
    graduate(path, pg_url)
    with errands.Queue(pg_url) as pg:
        moved, bare = pg.get(tagged), pg.get(plain)
    assert moved is not None and moved.headers == {
        "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    }
    assert bare is not None and bare.headers is None


def test_the_bookkeeping_table_is_the_schemas(tmp_path: Path, pg_url: str) -> None:
    # errands_graduation is created by a migration, not by graduate, and records
    # the finished graduation of this source.
    path = str(tmp_path / "app.db")
    build_source(path)
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT count(*) FROM errands_graduation").fetchone() == (0,)
    assert graduate(path, pg_url).ok
    with psycopg.connect(pg_url) as conn:
        rows = conn.execute("SELECT source, finished_at FROM errands_graduation").fetchall()
    assert [r[0] for r in rows] == [os.path.realpath(path)] and rows[0][1] is not None


def test_a_bookkeeping_table_from_an_older_graduate_is_kept(pg_url: str) -> None:
    # Before the migration, graduate created the table itself: migrating such a target must
    # keep it (IF NOT EXISTS), rows and all.
    from errands.backends import sql

    (owner,) = [v for v, text in sql.migrations("postgres") if "errands_graduation" in text]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("INSERT INTO errands_graduation (source) VALUES ('/old/app.db')")
        (version,) = first_row(
            conn.execute("SELECT max(version) FROM errands_migrations").fetchone()
        )
        conn.execute("DELETE FROM errands_migrations WHERE version >= %s", (owner,))
    errands.Queue(pg_url).close()  # applies that migration (and any after it) again
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT source FROM errands_graduation").fetchall() == [
            ("/old/app.db",)
        ]
        assert conn.execute("SELECT max(version) FROM errands_migrations").fetchone() == (version,)


def test_pauses_limits_and_limited_jobs_graduate(tmp_path: Path, pg_url: str) -> None:
    """Flow control carries over: a paused queue stays paused, a stored limit stays in force,
    and a limited job keeps its key and group (docs/flow-control.md)."""
    path = str(tmp_path / "app.db")
    with errands.Queue(path) as q:

        @q.task(limit=errands.Limit("t", running=1, group="tenant"))
        def sync(tenant: str) -> None: ...

        job_id = sync.enqueue(tenant="acme")
        q.pause("emails", reason="smtp down", actor="ops")
        q.set_limit("t", running=4, actor="ops")
    graduate(path, pg_url)
    with errands.Queue(pg_url) as pg:
        (queue,) = [i for i in pg.queues() if i.name == "emails"]
        assert queue.paused and (queue.reason, queue.paused_by) == ("smtp down", "ops")
        (limit,) = pg.limits()
        assert (limit.key, limit.running, limit.source) == ("t", 4, "set")
        job = pg.get(job_id)
        assert job is not None and (job.limit_key, job.limit_group) == ("t", "acme")


def test_time_rules_graduate_with_their_jobs(tmp_path: Path, pg_url: str) -> None:
    """A dedup window, a debounced job, a start-by time and a deadline carry over
    (docs/flow-control.md, "Time rules"): the hold of a succeeded job holds on the new
    database too."""
    path = str(tmp_path / "app.db")
    with errands.Queue(path) as q:

        @q.task
        def sync() -> None: ...

        @q.task
        def other(n: int = 0) -> None: ...

        held = q.enqueue("sync", {}, unique_key="sync:1", unique_for=3600)
        drain(q)
        debounced = q.enqueue("other", {"n": 1}, unique_key="d", debounce=600)
        expiring = q.enqueue("other", {}, expires_in=600)
        bounded = q.enqueue("other", {}, deadline=3600)
        deadline_at = q.get(bounded).deadline_at  # type: ignore[union-attr]
    graduate(path, pg_url)
    with errands.Queue(pg_url) as pg:
        assert pg.enqueue("sync", {}, unique_key="sync:1") == held
        assert pg.enqueue("other", {"n": 2}, unique_key="d", debounce=600) == debounced
        assert pg.get(debounced).payload == {"n": 2}  # type: ignore[union-attr]
        job = pg.get(expiring)
        assert job is not None and job.expires_in == 600 and job.expires_at is not None
        job = pg.get(bounded)
        assert job is not None and deadline_at is not None and job.deadline_at == deadline_at
