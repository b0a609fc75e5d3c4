"""Operator actions: manual retry and cancel, and the stats counts."""

from __future__ import annotations

import pytest

import errands
from helpers.support import FixedClock, claim, event_names


class Boom(Exception):
    pass


def _failed_job(q: errands.Queue, fail: list[bool]) -> tuple[int, errands.Task]:  # type: ignore[type-arg]
    @q.task(max_attempts=3, backoff=errands.fixed(0))
    def fragile() -> str:
        if fail[0]:
            raise Boom("still broken")
        return "fixed"

    job_id = fragile.enqueue()
    q.run_worker(burst=True, concurrency=1)
    job = q.get(job_id)
    assert job is not None and (job.status, job.attempts) == ("failed", 3)
    return job_id, fragile


def test_manual_retry_continues_attempt_numbering(queue: errands.Queue) -> None:
    fail = [True]
    job_id, _ = _failed_job(queue, fail)
    fail[0] = False

    queue.retry(job_id)
    job = queue.get(job_id)
    assert job is not None and job.status == "queued"
    assert event_names(queue, job_id)[-1] == "RETRIED"
    assert queue.events(job_id)[-1].actor == "api"

    queue.run_worker(burst=True, concurrency=1)
    job = queue.get(job_id)
    assert job is not None and (job.status, job.attempts, job.result) == ("succeeded", 4, "fixed")
    assert [(a.attempt, a.status) for a in queue.attempts(job_id)] == [
        (1, "failed"),
        (2, "failed"),
        (3, "failed"),
        (4, "succeeded"),
    ]
    assert event_names(queue, job_id)[-3:] == ["RETRIED", "CLAIMED", "SUCCEEDED"]


def test_manual_retry_gives_exactly_one_more_attempt(queue: errands.Queue) -> None:
    job_id, _ = _failed_job(queue, [True])
    queue.retry(job_id)
    queue.run_worker(burst=True, concurrency=1)
    job = queue.get(job_id)
    assert job is not None and (job.status, job.attempts) == ("failed", 4)
    assert len(queue.attempts(job_id)) == 4


def test_retry_of_a_cancelled_job_queues_it_again(queue: errands.Queue) -> None:
    job_id = queue.enqueue("t", {})
    queue.cancel(job_id)
    queue.retry(job_id)
    job = queue.get(job_id)
    assert job is not None and (job.status, job.attempts) == ("queued", 0)


def test_retry_of_a_queued_job_is_an_invalid_transition(queue: errands.Queue) -> None:
    job_id = queue.enqueue("t", {})
    with pytest.raises(errands.InvalidTransitionError, match="queued"):
        queue.retry(job_id)
    assert event_names(queue, job_id) == ["ENQUEUED"]


def test_cancel_of_a_queued_job(queue: errands.Queue) -> None:
    job_id = queue.enqueue("t", {})
    keep = queue.enqueue("t", {})

    assert queue.cancel(job_id) == "cancelled"

    job = queue.get(job_id)
    assert job is not None
    assert (job.status, job.error_code, job.attempts) == ("cancelled", "CANCELLED:BY_USER", 0)
    assert job.finished_at is not None
    assert event_names(queue, job_id) == ["ENQUEUED", "CANCELLED"]
    assert queue.events(job_id)[-1].actor == "api"
    assert [j.id for j in claim(queue, ["t"], limit=10)] == [keep]  # never claimed


def test_cancel_of_a_finished_job_is_an_invalid_transition(
    clocked_queue: errands.Queue, clock: FixedClock
) -> None:
    from errands.backends.base import Succeeded

    job_id = clocked_queue.enqueue("t", {})
    claim(clocked_queue, ["t"])
    clocked_queue.backend.finish([Succeeded(job_id, 1, clock.now, None)], "w1", clock.now)

    with pytest.raises(errands.InvalidTransitionError, match="succeeded"):
        clocked_queue.cancel(job_id)
    job = clocked_queue.get(job_id)
    assert job is not None and (job.status, job.error_code) == ("succeeded", None)
    assert "CANCELLED" not in event_names(clocked_queue, job_id)


def test_cancel_of_a_cancelled_job_is_an_invalid_transition(queue: errands.Queue) -> None:
    job_id = queue.enqueue("t", {})
    queue.cancel(job_id)
    with pytest.raises(errands.InvalidTransitionError):
        queue.cancel(job_id)
    assert event_names(queue, job_id).count("CANCELLED") == 1


def test_cancel_of_a_running_job_requests_cancellation(clocked_queue: errands.Queue) -> None:
    job_id = clocked_queue.enqueue("t", {})
    claim(clocked_queue, ["t"])
    assert clocked_queue.cancel(job_id) == "cancel_requested"
    job = clocked_queue.get(job_id)
    assert job is not None and (job.status, job.cancel_requested) == ("running", True)


def test_actions_on_a_missing_job_say_so(queue: errands.Queue) -> None:
    with pytest.raises(errands.JobNotFoundError, match="12345"):
        queue.cancel(12345)
    with pytest.raises(errands.JobNotFoundError, match="12345"):
        queue.retry(12345)
    assert queue.get(12345) is None


def test_stats_counts_every_state(queue: errands.Queue) -> None:
    a = queue.enqueue("t", {})
    queue.enqueue("t", {}, queue="other")
    queue.cancel(a)
    counts = queue.stats()["counts"]
    assert counts == {
        "waiting": 0,
        "queued": 1,
        "running": 0,
        "succeeded": 0,
        "failed": 0,
        "cancelled": 1,
    }


def test_urls_are_printed_without_their_password() -> None:
    from errands.backends import redact

    assert redact("postgresql://app:s3cret@db:5432/app") == "postgresql://app:***@db:5432/app"
    assert redact("postgresql://app@db/app") == "postgresql://app@db/app"
    assert redact("jobs.db") == "jobs.db"
