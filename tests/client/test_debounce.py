"""debounce: at most one queued job per key; each enqueue replaces its payload and pushes its
run_at to now + debounce, never past its first enqueue + max_wait; while one runs, the next
enqueue makes the one queued job after it; conflicting options are refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import errands
from errands.backends.base import Retried
from errands.testing import drain
from helpers.support import FixedClock, claim, event_names, get_job, run_cli


def test_a_burst_of_100_enqueues_runs_once_with_the_last_payload(
    clocked_queue: errands.Queue, clock: FixedClock
) -> None:
    q = clocked_queue
    runs: list[int] = []

    @q.task
    def reindex(n: int) -> None:
        runs.append(n)

    ids = set()
    for n in range(100):
        ids.add(q.enqueue("reindex", {"n": n}, unique_key="reindex", debounce=30))
        clock.advance(0.1)
    assert len(ids) == 1
    (job_id,) = ids
    job = get_job(q, job_id)
    assert job.payload == {"n": 99} and job.debounce_key == "reindex" and job.unique_key is None
    assert job.run_at is not None and job.run_at.timestamp() == pytest.approx(clock.now - 0.1 + 30)
    assert event_names(q, job_id) == ["ENQUEUED"] + ["DEBOUNCED"] * 99
    assert q.events(job_id)[-1].detail == {"run_at": pytest.approx(clock.now - 0.1 + 30)}

    drain(q)  # quiet for less than debounce: not due
    assert runs == []
    clock.advance(30)
    drain(q)
    assert runs == [99] and get_job(q, job_id).status == "succeeded"
    assert len(q.jobs()) == 1


def test_max_wait_bounds_how_far_run_at_is_pushed(
    clocked_queue: errands.Queue, clock: FixedClock
) -> None:
    q = clocked_queue
    first_at = clock.now
    job_id = q.enqueue("t", {"n": 0}, unique_key="k", debounce=30, max_wait=60)
    for n in range(1, 6):  # one every 10 s: without max_wait it would never be due
        clock.advance(10)
        assert q.enqueue("t", {"n": n}, unique_key="k", debounce=30, max_wait=60) == job_id
        run_at = get_job(q, job_id).run_at
        assert run_at is not None and run_at.timestamp() == min(clock.now + 30, first_at + 60)
    clock.advance(10)  # first enqueue + 60: due although the last enqueue was 10 s ago
    assert [j.id for j in claim(q, ["t"])] == [job_id]
    assert get_job(q, job_id).payload == {"n": 5}
    # A max_wait shorter than debounce bounds the first run_at too.
    other = q.enqueue("t", {}, unique_key="k2", debounce=30, max_wait=5)
    other_run_at = get_job(q, other).run_at
    assert other_run_at is not None and other_run_at.timestamp() == clock.now + 5


def test_while_one_runs_the_next_enqueue_makes_one_queued_job_after_it(
    clocked_queue: errands.Queue, clock: FixedClock
) -> None:
    q = clocked_queue
    running = q.enqueue("t", {"n": 1}, unique_key="k", debounce=5)
    clock.advance(5)
    assert [j.id for j in claim(q, ["t"])] == [running]
    nxt = q.enqueue("t", {"n": 2}, unique_key="k", debounce=5)
    assert nxt != running
    assert q.enqueue("t", {"n": 3}, unique_key="k", debounce=5) == nxt
    assert get_job(q, nxt).payload == {"n": 3} and get_job(q, running).payload == {"n": 1}
    assert sorted(j.status for j in q.jobs()) == ["queued", "running"]


def test_conflicting_options_against_the_queued_job_are_refused(queue: errands.Queue) -> None:
    job_id = queue.enqueue("t", {}, unique_key="k", debounce=30)
    for other, named in (
        ({"queue": "mail"}, "queue 'mail'"),
        ({"priority": 5}, "priority 5"),
    ):
        with pytest.raises(errands.ConfigurationError, match=named):
            queue.enqueue("t", {}, unique_key="k", debounce=30, **other)
    with pytest.raises(errands.ConfigurationError, match="'u'"):
        queue.enqueue("u", {}, unique_key="k", debounce=30)
    assert [j.id for j in queue.jobs()] == [job_id]  # nothing written by the refused ones
    assert event_names(queue, job_id) == ["ENQUEUED"]


def test_debounced_items_of_enqueue_many(clocked_queue: errands.Queue) -> None:
    ids = clocked_queue.enqueue_many(
        [("t", {"n": n}, {"unique_key": "k", "debounce": 10}) for n in range(3)] + [("t", {})]
    )
    assert ids[0] == ids[1] == ids[2] != ids[3]
    assert get_job(clocked_queue, ids[0]).payload == {"n": 2}


def test_debounce_is_checked_when_the_options_are_built() -> None:
    bad: dict[str, Any]
    for bad, message in (
        ({"debounce": 5}, "debounce needs unique_key"),
        ({"unique_key": "k", "max_wait": 5}, "max_wait bounds a debounce"),
        ({"unique_key": "k", "debounce": 0}, "debounce must be > 0"),
        ({"unique_key": "k", "debounce": 5, "max_wait": -1}, "max_wait"),
        ({"unique_key": "k", "debounce": 5, "delay": 1}, "delay= cannot be given"),
        ({"unique_key": "k", "debounce": 5, "run_at": 1.0}, "run_at= cannot be given"),
        ({"unique_key": "k", "debounce": 5, "after": [1]}, "after= cannot be given"),
        ({"unique_key": "k", "debounce": 5, "unique_for": 9}, "unique_for= cannot be given"),
    ):
        with pytest.raises(errands.ConfigurationError, match=message):
            errands.EnqueueOptions(**bad)


def test_the_cli_takes_and_shows_it(queue: errands.Queue, tmp_path: Path) -> None:
    args = ["enqueue", "t", "--db", queue.url, "--json", "--unique-key", "k", "--debounce", "30s"]
    first = run_cli(tmp_path, *args, "--max-wait", "5m", "--payload", '{"n": 1}')
    again = run_cli(tmp_path, *args, "--payload", '{"n": 2}')
    assert first.returncode == again.returncode == 0, first.stderr + again.stderr
    job_id = json.loads(first.stdout)["id"]
    assert json.loads(again.stdout)["id"] == job_id
    assert get_job(queue, job_id).payload == {"n": 2}
    shown = run_cli(tmp_path, "show", str(job_id), "--db", queue.url)
    assert "DEBOUNCED" in shown.stdout and "debounce key" in shown.stdout


def test_a_retrying_job_is_not_updated_and_a_plain_unique_key_does_not_meet_it(
    clocked_queue: errands.Queue, clock: FixedClock
) -> None:
    q = clocked_queue
    first = q.enqueue("t", {"n": 1}, unique_key="k", debounce=5)
    clock.advance(5)
    claim(q, ["t"])
    retry = Retried(first, 1, clock.now, "BOOM", "", None, clock.now + 60)
    assert q.backend.finish([retry], "w1", clock.now)
    assert get_job(q, first).status == "queued"  # a retry waiting: a job of its own
    nxt = q.enqueue("t", {"n": 2}, unique_key="k", debounce=5)
    assert nxt != first and get_job(q, first).payload == {"n": 1}
    plain = q.enqueue("t", {"n": 3}, unique_key="k")
    assert plain not in (first, nxt)
