"""unique_for: a dedup window that outlives the job. After a job with that unique_key
succeeded, an enqueue with the key returns it until its finish + unique_for; failed and
cancelled jobs release the key; prune keeps the row while the hold lasts."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

import errands
from errands.backends.base import Failed, Succeeded
from errands.web import create_app
from helpers.support import FixedClock, claim, get_job, run_cli

HOUR = 3600.0


def _succeed(q: errands.Queue, clock: FixedClock, job_id: int) -> None:
    assert [j.id for j in claim(q, ["t"])] == [job_id]
    assert q.backend.finish([Succeeded(job_id, 1, clock.now, None)], "w1", clock.now)


def test_a_succeeded_job_holds_its_key_for_unique_for(
    clocked_queue: errands.Queue, clock: FixedClock
) -> None:
    q = clocked_queue
    first = q.enqueue("t", {"n": 1}, unique_key="sync:42", unique_for=timedelta(hours=1))
    assert get_job(q, first).unique_for == HOUR
    _succeed(q, clock, first)

    clock.advance(HOUR - 1)
    # Any enqueue of the key meets the hold, with or without a window of its own.
    assert q.enqueue("t", {"n": 2}, unique_key="sync:42", unique_for=HOUR) == first
    assert q.enqueue("t", {"n": 3}, unique_key="sync:42") == first
    assert q.enqueue_many([("t", {"n": 4}, {"unique_key": "sync:42"})]) == [first]
    assert len(q.jobs()) == 1

    clock.advance(2)  # past finish + unique_for: the key is free again
    second = q.enqueue("t", {"n": 5}, unique_key="sync:42", unique_for=HOUR)
    assert second != first
    assert [j.status for j in q.jobs()] == ["queued", "succeeded"]


def test_without_unique_for_a_success_releases_the_key(
    clocked_queue: errands.Queue, clock: FixedClock
) -> None:
    first = clocked_queue.enqueue("t", {}, unique_key="k")
    _succeed(clocked_queue, clock, first)
    assert clocked_queue.enqueue("t", {}, unique_key="k", unique_for=HOUR) != first


def test_failed_and_cancelled_jobs_release_the_key(
    clocked_queue: errands.Queue, clock: FixedClock
) -> None:
    q = clocked_queue
    failed = q.enqueue("t", {}, unique_key="k", unique_for=HOUR, max_attempts=1)
    claim(q, ["t"])
    assert q.backend.finish([Failed(failed, 1, clock.now, "BOOM", "", None)], "w1", clock.now)
    cancelled = q.enqueue("t", {}, unique_key="k", unique_for=HOUR)
    assert cancelled != failed
    q.cancel(cancelled)
    assert q.enqueue("t", {}, unique_key="k", unique_for=HOUR) not in (failed, cancelled)


def test_the_hold_outlives_prune(
    make_queue: Callable[..., errands.Queue], clock: FixedClock
) -> None:
    q = make_queue(clock=clock, retention={"succeeded": 60})
    held = q.enqueue("t", {}, unique_key="k", unique_for=HOUR)
    _succeed(q, clock, held)
    plain = q.enqueue("t", {}, unique_key="other")
    assert [j.id for j in claim(q, ["t"])] == [plain]
    assert q.backend.finish([Succeeded(plain, 1, clock.now, None)], "w1", clock.now)

    clock.advance(600)  # past retention, within the hold
    assert q.prune(dry_run=True).deleted["succeeded"] == 1
    assert q.prune().deleted["succeeded"] == 1  # the plain job only
    assert [j.id for j in q.jobs()] == [held]
    assert q.enqueue("t", {}, unique_key="k") == held

    clock.advance(HOUR)  # the hold is over: prune takes it, and the key is free
    assert q.prune().deleted["succeeded"] == 1
    assert q.enqueue("t", {}, unique_key="k") != held


def test_unique_for_with_after_meets_the_hold(
    clocked_queue: errands.Queue, clock: FixedClock
) -> None:
    q = clocked_queue
    first = q.enqueue("t", {}, unique_key="k", unique_for=HOUR)
    _succeed(q, clock, first)
    up = q.enqueue("u", {})
    assert q.enqueue("t", {}, unique_key="k", after=[up]) == first


def test_unique_for_is_checked_when_the_options_are_built() -> None:
    with pytest.raises(errands.ConfigurationError, match="unique_for needs unique_key"):
        errands.EnqueueOptions(unique_for=60)
    bad: Any
    for bad in (0, -1, "1h", float("nan")):
        with pytest.raises(errands.ConfigurationError, match="unique_for"):
            errands.EnqueueOptions(unique_key="k", unique_for=bad)
    assert errands.EnqueueOptions(unique_key="k", unique_for=timedelta(minutes=2)).unique_for == 120


def test_the_cli_and_the_json_api_take_and_show_it(queue: errands.Queue, tmp_path: Path) -> None:
    out = run_cli(
        tmp_path, "enqueue", "t", "--db", queue.url, "--json",
        "--unique-key", "k", "--unique-for", "1h",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    job_id = json.loads(out.stdout)["id"]
    assert get_job(queue, job_id).unique_for == HOUR
    shown = run_cli(tmp_path, "show", str(job_id), "--db", queue.url)
    assert "k (held 3600s after success)" in shown.stdout
    shown = run_cli(tmp_path, "show", str(job_id), "--db", queue.url, "--json")
    assert json.loads(shown.stdout)["job"]["unique_for"] == HOUR
    bad = run_cli(tmp_path, "enqueue", "t", "--db", queue.url, "--unique-for", "1h")
    assert bad.returncode == 2 and "unique_for needs unique_key" in bad.stderr
    c = TestClient(create_app(queue))
    r = c.post("/api/admin/jobs", json={"type": "t", "unique_key": "j", "unique_for": 60})
    assert r.status_code == 201 and get_job(queue, r.json()["id"]).unique_for == 60
