"""deadline: counted from created_at on the database clock, over all attempts: no attempt
starts after it. The claim never starts a job past it, a retry or a sleep that would fall
after it fails the job at once (DEADLINE:EXCEEDED), the expiry service fails the queued
ones left so counts stay true, a manual retry lifts it, and a running attempt is never
interrupted."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from starlette.testclient import TestClient

import errands
from errands.backends import sql
from errands.backends.base import Retried, Succeeded
from errands.context import JobContext
from errands.maintenance.expirer import Expirer
from errands.testing import drain
from errands.web import create_app
from helpers.ops import assert_figures_equal_a_recount
from helpers.support import FixedClock, claim, event_names, get_job, run_cli

DEADLINE = "DEADLINE:EXCEEDED"


def test_no_attempt_starts_after_it_and_the_service_fails_the_job(
    clocked_queue: errands.Queue, clock: FixedClock
) -> None:
    q = clocked_queue
    late = q.enqueue("send", {"n": 1}, deadline=60, delay=120)  # due after its deadline
    timely = q.enqueue("send", {"n": 2}, deadline=timedelta(minutes=10), delay=120)
    job = get_job(q, late)
    assert job.deadline_at is not None and job.deadline_at.timestamp() == clock.now + 60
    clock.advance(120)
    assert [j.id for j in claim(q, ["send"], limit=10)] == [timely]  # never the late one
    assert get_job(q, late).status == "queued"  # until the service ends it
    report = Expirer(q.backend).run_once(clock.now)
    assert (report.past_deadline, report.expired) == ([late], [])
    job = get_job(q, late)
    assert (job.status, job.error_code, job.attempts) == ("failed", DEADLINE, 0)
    assert event_names(q, late) == ["ENQUEUED", "FAILED"]
    assert q.events(late)[-1].actor == "system"
    assert q.stats()["counts"]["failed"] == 1
    assert_figures_equal_a_recount(q.url)
    assert Expirer(q.backend).run_once(clock.now).past_deadline == []


def test_a_retry_that_would_start_after_it_fails_the_job_at_once(
    clocked_queue: errands.Queue, clock: FixedClock
) -> None:
    q = clocked_queue
    job_id = q.enqueue("t", {}, deadline=100, max_attempts=5)
    assert [j.id for j in claim(q, ["t"])] == [job_id]
    clock.advance(10)
    within = Retried(job_id, 1, clock.now - 10, "BOOM", "first", None, clock.now + 50)
    assert q.backend.finish([within], "w1", clock.now)
    assert get_job(q, job_id).status == "queued"  # 60 s in: still before the deadline
    clock.advance(50)
    assert [j.id for j in claim(q, ["t"])] == [job_id]
    # Exactly at the deadline: the claim starts nothing at its deadline, so this fails too.
    at = Retried(job_id, 2, clock.now, "BOOM", "second", "Traceback…", clock.now + 40)
    assert q.backend.finish([at], "w1", clock.now)
    job = get_job(q, job_id)
    assert (job.status, job.error_code, job.attempts) == ("failed", DEADLINE, 2)
    assert job.error_detail is not None and "BOOM: second" in job.error_detail
    assert event_names(q, job_id)[-1] == "FAILED"
    assert [a.error_code for a in q.attempts(job_id)] == ["BOOM", DEADLINE]
    assert_figures_equal_a_recount(q.url)


def test_a_retry_by_the_worker_past_it_fails_and_a_manual_retry_lifts_it(
    make_queue: Callable[..., errands.Queue], clock: FixedClock
) -> None:
    q = make_queue(clock=clock)
    runs: list[int] = []

    @q.task(deadline=30, max_attempts=3, backoff=errands.fixed(60))
    def flaky(ctx: JobContext) -> None:
        runs.append(ctx.attempt)
        if len(runs) < 2:
            raise RuntimeError("down")

    job_id = flaky.enqueue()
    (bulk,) = q.enqueue_many([("flaky", {})])
    assert get_job(q, bulk).deadline_at is not None  # the task default, in bulk too
    longer = flaky.with_options(deadline=3600).enqueue()
    deadline_at = get_job(q, longer).deadline_at
    assert deadline_at is not None and deadline_at.timestamp() == clock.now + 3600
    q.run_worker(burst=True, queues=["default"])
    job = get_job(q, job_id)
    assert (job.status, job.error_code) == ("failed", DEADLINE)  # its retry was 60 s away
    q.retry(job_id)
    assert get_job(q, job_id).deadline_at is None
    clock.advance(3600)  # long past its old deadline: the retry still starts
    drain(q)
    assert get_job(q, job_id).status == "succeeded"


def test_a_sleep_past_it_fails_the_job_and_one_before_it_sleeps(
    clocked_queue: errands.Queue, clock: FixedClock
) -> None:
    q = clocked_queue

    @q.task
    def nap(ctx: JobContext, seconds: float) -> None:
        ctx.sleep(seconds)

    short = nap.with_options(deadline=60).enqueue(seconds=30)
    long = nap.with_options(deadline=60).enqueue(seconds=3600)
    q.run_worker(burst=True)
    assert get_job(q, short).status == "queued"  # asleep until 30 s from now
    job = get_job(q, long)
    assert (job.status, job.error_code) == ("failed", DEADLINE)
    assert event_names(q, long)[-1] == "FAILED"
    clock.advance(30)
    q.run_worker(burst=True)
    assert get_job(q, short).status == "succeeded"


def test_a_running_attempt_is_never_interrupted(
    clocked_queue: errands.Queue, clock: FixedClock
) -> None:
    q = clocked_queue
    job_id = q.enqueue("t", {}, deadline=10)
    assert [j.id for j in claim(q, ["t"])] == [job_id]
    clock.advance(3600)
    assert Expirer(q.backend).run_once(clock.now).past_deadline == []
    assert get_job(q, job_id).status == "running"
    assert q.backend.finish([Succeeded(job_id, 1, clock.now - 3600, None)], "w1", clock.now)
    assert get_job(q, job_id).status == "succeeded"


def test_every_range_of_a_resumed_claim_passes_over_it(
    clocked_queue: errands.Queue, clock: FixedClock
) -> None:
    """PostgreSQL's claim resumes past the last job it claimed (backends/claim_position.py):
    higher priorities from the front, that priority past the position, lower ones from their
    front. Each range must pass over a job past its deadline as a scan from the front does."""
    q = clocked_queue
    first = q.enqueue("send", {})
    assert [j.id for j in claim(q, ["send"])] == [first]  # the position is now past it
    clock.advance(1)
    late = [
        q.enqueue("send", {}, deadline=1, priority=p)  # above, at and below the position
        for p in (1, 0, -1)
    ]
    clock.advance(2)  # all past their deadline; within the position's front-scan period
    assert claim(q, ["send"], limit=10) == []
    assert {get_job(q, j).status for j in late} == {"queued"}


def test_the_limited_and_fair_claims_pass_over_it(
    clocked_queue: errands.Queue, clock: FixedClock
) -> None:
    """A worker with limited types claims through its own queries: each limited group's
    (limited_due), the fair values' (fair_due), and the unlimited jobs weighed with them
    (unlimited_due, read once some limited job may start)."""
    q = clocked_queue
    ran: list[str] = []

    @q.task(limit=errands.Limit("capped", running=5))
    def capped(n: int) -> None:
        ran.append(f"capped{n}")

    @q.task(fair="tenant")
    def shared(tenant: str) -> None:
        ran.append(f"shared:{tenant}")

    @q.task
    def free() -> None:
        ran.append("free")

    late = [
        capped.with_options(deadline=1).enqueue(n=1),
        shared.with_options(deadline=1).enqueue(tenant="a"),
        free.with_options(deadline=1).enqueue(),
    ]
    capped.enqueue(n=2)  # limited jobs that may start: unlimited_due is read too
    shared.enqueue(tenant="b")
    clock.advance(2)
    # Another holds the expiry service's lease: only the claim stands between them and a run.
    assert q.backend.try_lead("expiry", "elsewhere", 3600, clock.now)
    q.run_worker(burst=True)
    assert sorted(ran) == ["capped2", "shared:b"]
    assert {get_job(q, j).status for j in late} == {"queued"}


def test_each_claim_range_has_the_predicate() -> None:
    """Every range a claim reads (the three of PostgreSQL's resumed scan in claim and
    claim_recorded, the limited and fair claims') carries the deadline predicate: the paths a
    worker does not take on this dialect are held to it too."""
    for dialect in ("sqlite", "postgres"):
        queries = sql.queries(dialect)
        for name in ("claim", "limited_due", "unlimited_due", "fair_due", "claim_recorded"):
            if name == "claim_recorded" and name not in sql.own_queries(dialect):
                continue
            if name in sql.REPLACED[dialect]:  # PostgreSQL's claim is claim_recorded
                continue
            text = queries[name]
            ranges = text.count("WHERE status = 'queued'")
            assert ranges and text.count("deadline_at IS NULL OR deadline_at >") == ranges, (
                dialect,
                name,
            )


def test_it_is_checked_and_the_cli_and_json_api_take_and_show_it(
    clocked_queue: errands.Queue, tmp_path: Path
) -> None:
    q = clocked_queue
    for bad in (0, -5, "10m"):
        with pytest.raises(errands.ConfigurationError, match="deadline"):
            errands.EnqueueOptions(deadline=bad)  # type: ignore[arg-type]
    with pytest.raises(errands.ConfigurationError, match="deadline"):
        q.task(deadline=-1)(lambda: None)
    out = run_cli(tmp_path, "enqueue", "t", "--db", q.url, "--json", "--deadline", "1h")
    assert out.returncode == 0, out.stderr
    job_id = json.loads(out.stdout)["id"]
    job = get_job(q, job_id)
    assert job.deadline_at is not None and job.created_at is not None
    assert job.deadline_at.timestamp() - job.created_at.timestamp() == pytest.approx(3600)
    shown = run_cli(tmp_path, "show", str(job_id), "--db", q.url)
    printed = re.search(r"^  deadline\s+(\S+ \S+)$", shown.stdout, re.M)
    assert printed is not None, shown.stdout
    at = datetime.fromisoformat(printed.group(1) + "+00:00")
    assert abs(at.timestamp() - job.deadline_at.timestamp()) < 1
    shown = run_cli(tmp_path, "show", str(job_id), "--db", q.url, "--json")
    assert json.loads(shown.stdout)["job"]["deadline_at"] is not None
    c = TestClient(create_app(q))
    r = c.post("/api/admin/jobs", json={"type": "t", "deadline": 60})
    assert r.status_code == 201, r.text
    job = get_job(q, r.json()["id"])
    assert job.deadline_at is not None and job.created_at is not None
    assert job.deadline_at.timestamp() - job.created_at.timestamp() == pytest.approx(60)
