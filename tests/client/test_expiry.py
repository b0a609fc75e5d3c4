"""expires_in: counted from when the job is due (its run_at, or its release by dependencies),
paused time included; a job not started by then is cancelled with EXPIRED:QUEUE without
running — the claim never starts it, and the expiry service ends it so counts stay true."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest

import errands
from errands.backends.base import Retried, Succeeded
from errands.maintenance.expirer import Expirer
from errands.testing import drain
from helpers.ops import assert_figures_equal_a_recount
from helpers.support import FixedClock, claim, event_names, get_job, run_cli


def test_a_job_not_started_in_time_never_runs_and_is_cancelled(
    clocked_queue: errands.Queue, clock: FixedClock
) -> None:
    q = clocked_queue
    ran: list[int] = []

    @q.task
    def send(n: int) -> None:
        ran.append(n)

    late = q.enqueue("send", {"n": 1}, expires_in=600)
    timely = q.enqueue("send", {"n": 2}, expires_in=timedelta(minutes=10), delay=300)
    job = get_job(q, late)
    assert job.expires_in == 600 and job.expires_at is not None
    assert job.expires_at.timestamp() == clock.now + 600
    clock.advance(600)  # late: due since 600 s, its window is over; timely: due 300 s ago
    assert [j.id for j in claim(q, ["send"])] == [timely]  # the claim passes over the late one
    assert get_job(q, late).status == "queued"  # until the service ends it
    report = Expirer(q.backend).run_once(clock.now)
    assert report.expired == [late]
    job = get_job(q, late)
    assert (job.status, job.error_code) == ("cancelled", "EXPIRED:QUEUE")
    assert event_names(q, late) == ["ENQUEUED", "CANCELLED"]
    assert q.events(late)[-1].actor == "system"
    assert q.stats()["counts"]["cancelled"] == 1
    assert_figures_equal_a_recount(q.url)
    assert Expirer(q.backend).run_once(clock.now).expired == []
    drain(q)
    assert ran == []  # neither ran here: the timely one is held by the claim above


def test_paused_time_counts_and_a_started_job_is_never_expired(
    clocked_queue: errands.Queue, clock: FixedClock
) -> None:
    q = clocked_queue
    paused = q.enqueue("t", {}, queue="mail", expires_in=60)
    started = q.enqueue("t", {}, expires_in=60)
    q.pause("mail")
    assert [j.id for j in claim(q, ["t"])] == [started]
    retry = Retried(started, 1, clock.now, "BOOM", "", None, clock.now + 120)
    assert q.backend.finish([retry], "w1", clock.now)
    clock.advance(61)
    q.resume("mail")
    clock.advance(60)  # the retry is due; it started once, so expires_in is behind it
    assert [j.id for j in claim(q, ["t"])] == [started]
    assert Expirer(q.backend).run_once(clock.now).expired == [paused]


def test_counted_from_the_release_by_dependencies(
    clocked_queue: errands.Queue, clock: FixedClock
) -> None:
    q = clocked_queue
    up = q.enqueue("u", {})
    down = q.enqueue("t", {}, after=[up], expires_in=60)
    assert get_job(q, down).expires_at is None  # not due yet: no start-by time
    clock.advance(600)
    assert [j.id for j in claim(q, ["u"])] == [up]
    assert q.backend.finish([Succeeded(up, 1, clock.now, None)], "w1", clock.now)
    expires_at = get_job(q, down).expires_at
    assert expires_at is not None and expires_at.timestamp() == clock.now + 60
    clock.advance(30)
    assert [j.id for j in claim(q, ["t"])] == [down]


def test_a_manual_retry_lifts_it_and_the_task_default(
    make_queue: Callable[..., errands.Queue], clock: FixedClock
) -> None:
    q = make_queue(clock=clock)

    @q.task(expires_in=30)
    def ping() -> None: ...

    job_id = ping.enqueue()
    assert get_job(q, job_id).expires_in == 30
    (bulk,) = q.enqueue_many([("ping", {})])
    assert get_job(q, bulk).expires_in == 30
    assert get_job(q, ping.with_options(expires_in=90).enqueue()).expires_in == 90
    clock.advance(60)  # past 30, within 90
    assert sorted(Expirer(q.backend).run_once(clock.now).expired) == sorted([job_id, bulk])
    q.retry(job_id)
    assert get_job(q, job_id).expires_at is None
    clock.advance(3600)  # long past its old start-by time: the retry still starts
    assert job_id in [j.id for j in claim(q, ["ping"], limit=10)]


def test_a_debounced_job_expires_from_its_latest_run_at(
    clocked_queue: errands.Queue, clock: FixedClock
) -> None:
    q = clocked_queue
    job_id = q.enqueue("t", {}, unique_key="k", debounce=10, expires_in=5)
    clock.advance(8)
    q.enqueue("t", {}, unique_key="k", debounce=10, expires_in=5)
    expires_at = get_job(q, job_id).expires_at
    assert expires_at is not None and expires_at.timestamp() == clock.now + 15


def test_expires_in_is_checked(clocked_queue: errands.Queue, tmp_path: Path) -> None:
    for bad in (0, -5, "10m"):
        with pytest.raises(errands.ConfigurationError, match="expires_in"):
            errands.EnqueueOptions(expires_in=bad)  # type: ignore[arg-type]
    with pytest.raises(errands.ConfigurationError, match="expires_in"):
        clocked_queue.task(expires_in=-1)(lambda: None)
    url = clocked_queue.url
    out = run_cli(tmp_path, "enqueue", "t", "--db", url, "--json", "--expires-in", "10m")
    assert out.returncode == 0, out.stderr
    assert get_job(clocked_queue, json.loads(out.stdout)["id"]).expires_in == 600


def test_the_claim_passes_over_an_expired_job_wherever_its_scan_resumes(
    clocked_queue: errands.Queue, clock: FixedClock
) -> None:
    """PostgreSQL's claim resumes past the last job it claimed (backends/claim_position.py):
    a job due after that position is read by the resumed range, which must pass over it
    once expired just as a scan from the front does."""
    q = clocked_queue
    first = q.enqueue("send", {})
    assert [j.id for j in claim(q, ["send"])] == [first]  # the position is now past it
    clock.advance(1)
    same = q.enqueue("send", {}, expires_in=1)  # same priority, after the position
    lower = q.enqueue("send", {}, expires_in=1, priority=-1)  # a lower priority's range
    clock.advance(2)  # both expired; within the position's front-scan period
    assert claim(q, ["send"]) == []
    assert {get_job(q, same).status, get_job(q, lower).status} == {"queued"}


def test_the_fair_claim_passes_over_an_expired_job(
    clocked_queue: errands.Queue, clock: FixedClock
) -> None:
    q = clocked_queue
    ran: list[str] = []

    @q.task(fair="tenant")
    def shared(tenant: str) -> None:
        ran.append(tenant)

    expired = shared.with_options(expires_in=1).enqueue(tenant="a")
    shared.enqueue(tenant="b")
    clock.advance(2)
    # Another holds the expiry service's lease: only the claim stands between it and a run.
    assert q.backend.try_lead("expiry", "elsewhere", 3600, clock.now)
    q.run_worker(burst=True)
    assert ran == ["b"]
    assert get_job(q, expired).status == "queued"
