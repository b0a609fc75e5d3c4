"""The worker end to end: retries and backoff, error codes, results, ctx, async, burst."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

import errands
from helpers.support import FixedClock, event_names, get_job, wait_for

MakeQueue = Callable[..., errands.Queue]


def drain(q: errands.Queue, **kwargs: Any) -> errands.WorkerSummary:
    summary: errands.WorkerSummary = q.run_worker(burst=True, concurrency=2, **kwargs)
    return summary


class Boom(Exception):
    pass


# -- retry, backoff, failed -----------------------------------------------------------------


def test_retry_then_backoff_then_failed_keeps_every_attempt(queue: errands.Queue) -> None:
    calls: list[int] = []

    @queue.task(max_attempts=3, backoff=errands.fixed(0))
    def always_fails(n: int) -> None:
        calls.append(n)
        raise Boom(f"boom {len(calls)}")

    job_id = always_fails.enqueue(n=1)
    summary = drain(queue)

    job = queue.get(job_id)
    assert job is not None
    assert (job.status, job.attempts, job.error_code) == ("failed", 3, "INTERNAL:Boom")
    assert job.error_detail == "Boom: boom 3"
    assert job.finished_at is not None
    assert calls == [1, 1, 1]
    assert (summary.retried, summary.failed) == (2, 1)
    attempts = queue.attempts(job_id)
    assert [(a.attempt, a.status, a.error_code) for a in attempts] == [
        (n, "failed", "INTERNAL:Boom") for n in (1, 2, 3)
    ]
    for n, attempt in enumerate(attempts, 1):
        tb = queue.traceback(attempt)
        assert tb is not None
        assert "Traceback (most recent call last)" in tb
        assert f"Boom: boom {n}" in tb and "always_fails" in tb
    assert event_names(queue, job_id) == [
        "ENQUEUED",
        "CLAIMED",
        "RETRY_SCHEDULED",
        "CLAIMED",
        "RETRY_SCHEDULED",
        "CLAIMED",
        "FAILED",
    ]


def test_backoff_delays_the_retry_by_the_tasks_strategy(
    clocked_queue: errands.Queue, clock: FixedClock
) -> None:
    q = clocked_queue
    calls: list[float] = []

    @q.task(max_attempts=2, backoff=errands.fixed(30))
    def flaky() -> str:
        calls.append(clock.now)
        if len(calls) == 1:
            raise Boom("first time")
        return "ok"

    job_id = flaky.enqueue()
    start = clock.now
    drain(q)

    job = q.get(job_id)
    assert job is not None and (job.status, job.attempts) == ("queued", 1)
    assert job.run_at is not None and job.run_at.timestamp() == start + 30
    retry_event = q.events(job_id)[-1]
    assert retry_event.event == "RETRY_SCHEDULED"
    assert retry_event.detail["attempt"] == 1 and retry_event.detail["delay"] == 30
    assert retry_event.detail["error_code"] == "INTERNAL:Boom"

    clock.advance(29)
    drain(q)
    assert len(calls) == 1  # not due yet
    clock.advance(1)
    drain(q)
    job = q.get(job_id)
    assert job is not None and (job.status, job.attempts, job.result) == ("succeeded", 2, "ok")


def test_a_callable_backoff_gets_the_attempt_number(
    clocked_queue: errands.Queue, clock: FixedClock
) -> None:
    q = clocked_queue
    asked: list[int] = []

    def backoff(attempt: int) -> float:
        asked.append(attempt)
        return 7.0 * attempt

    @q.task(max_attempts=3, backoff=backoff)
    def fails() -> None:
        raise Boom

    job_id = fails.enqueue()
    drain(q)
    clock.advance(7)
    drain(q)
    assert asked == [1, 2]
    job = q.get(job_id)
    assert job is not None and job.run_at is not None
    assert job.run_at.timestamp() == clock.now + 14


def test_backoff_strategies_are_capped_and_jittered() -> None:
    assert [errands.exponential(2, 10, jitter=False)(n) for n in (1, 2, 3, 4, 9)] == [
        2,
        4,
        8,
        10,
        10,
    ]
    assert [errands.linear(5, 12, jitter=False)(n) for n in (1, 2, 3)] == [5, 10, 12]
    assert errands.fixed(3)(1) == errands.fixed(3)(50) == 3
    jittered = [errands.exponential(2, 3600)(3) for _ in range(200)]
    assert all(8 * 0.8 <= d <= 8 * 1.2 for d in jittered)
    assert len(set(jittered)) > 1
    assert all(d <= 100 for d in (errands.exponential(2, 100)(20) for _ in range(50)))


def test_job_error_with_retry_false_fails_after_one_attempt(queue: errands.Queue) -> None:
    @queue.task(max_attempts=5, backoff=errands.fixed(0))
    def reject() -> None:
        raise errands.JobError("SMTP:REJECTED", "mailbox does not exist", retry=False)

    job_id = reject.enqueue()
    drain(queue)
    job = queue.get(job_id)
    assert job is not None
    assert (job.status, job.attempts, job.error_code, job.error_detail) == (
        "failed",
        1,
        "SMTP:REJECTED",
        "mailbox does not exist",
    )
    assert [a.error_code for a in queue.attempts(job_id)] == ["SMTP:REJECTED"]


def test_job_error_with_retry_true_is_retried_under_its_code(queue: errands.Queue) -> None:
    @queue.task(max_attempts=2, backoff=errands.fixed(0))
    def soft() -> None:
        raise errands.JobError("UPSTREAM:BUSY", "try later")

    job_id = soft.enqueue()
    drain(queue)
    job = queue.get(job_id)
    assert job is not None and (job.status, job.attempts, job.error_code) == (
        "failed",
        2,
        "UPSTREAM:BUSY",
    )


def test_job_error_code_must_be_category_colon_subcategory() -> None:
    with pytest.raises(ValueError, match="CATEGORY:SUBCATEGORY"):
        errands.JobError("not a code")


def test_payload_that_does_not_fit_the_handler_fails_without_retry(
    make_queue: MakeQueue,
) -> None:
    producer = make_queue()  # no tasks: it can enqueue types another service runs
    job_id = producer.enqueue("greet", {"nmae": "Ada"}, max_attempts=5)
    worker = make_queue()
    ran: list[str] = []

    @worker.task(backoff=errands.fixed(0))
    def greet(name: str) -> None:
        ran.append(name)

    drain(worker)

    job = worker.get(job_id)
    assert job is not None
    assert (job.status, job.attempts, job.error_code) == ("failed", 1, "INVALID_INPUT:PAYLOAD")
    assert "greet" in (job.error_detail or "") and "'name'" in (job.error_detail or "")
    assert ran == []


def test_retry_on_retries_only_the_listed_exceptions(queue: errands.Queue) -> None:
    @queue.task(max_attempts=3, backoff=errands.fixed(0), retry_on=(ConnectionError,))
    def fetch(kind: str) -> None:
        raise ConnectionError("reset") if kind == "net" else ValueError("bad data")

    net, bad = fetch.enqueue(kind="net"), fetch.enqueue(kind="data")
    drain(queue)
    net_job, bad_job = queue.get(net), queue.get(bad)
    assert net_job is not None and bad_job is not None
    assert (net_job.status, net_job.attempts, net_job.error_code) == (
        "failed",
        3,
        "INTERNAL:ConnectionError",
    )
    assert (bad_job.status, bad_job.attempts, bad_job.error_code) == (
        "failed",
        1,
        "INTERNAL:ValueError",
    )


def test_discard_on_fails_at_once_and_others_are_retried(queue: errands.Queue) -> None:
    @queue.task(max_attempts=3, backoff=errands.fixed(0), discard_on=(KeyError,))
    def lookup(kind: str) -> None:
        raise KeyError("gone") if kind == "missing" else RuntimeError("flaky")

    missing, flaky = lookup.enqueue(kind="missing"), lookup.enqueue(kind="flaky")
    drain(queue)
    assert (get_job(queue, missing).status, get_job(queue, missing).attempts) == ("failed", 1)
    assert (get_job(queue, flaky).status, get_job(queue, flaky).attempts) == ("failed", 3)


def test_non_json_result_fails_with_invalid_output(queue: errands.Queue) -> None:
    @queue.task(max_attempts=3, backoff=errands.fixed(0))
    def returns_a_set() -> Any:
        return {1, 2}

    job_id = returns_a_set.enqueue()
    drain(queue)
    job = queue.get(job_id)
    assert job is not None
    assert (job.status, job.attempts, job.error_code) == ("failed", 1, "INVALID_OUTPUT:RESULT")
    assert "set" in (job.error_detail or "") and job.result is None


def test_json_result_is_stored(queue: errands.Queue) -> None:
    @queue.task
    def compute(x: int) -> dict[str, Any]:
        return {"double": x * 2, "items": [1, "two", None, True], "ratio": 0.5}

    job_id = compute.enqueue(x=21)
    drain(queue)
    job = queue.get(job_id)
    assert job is not None and job.status == "succeeded"
    assert job.result == {"double": 42, "items": [1, "two", None, True], "ratio": 0.5}


def test_error_detail_is_at_most_500_characters(queue: errands.Queue) -> None:
    @queue.task(max_attempts=1)
    def long_error() -> None:
        raise Boom("x" * 5000 + "END")

    @queue.task(max_attempts=1)
    def long_job_error() -> None:
        raise errands.JobError("APP:LONG", "y" * 5000)

    a, b = long_error.enqueue(), long_job_error.enqueue()
    drain(queue)
    for job_id in (a, b):
        job = queue.get(job_id)
        assert job is not None and job.status == "failed"
        assert job.error_detail and 0 < len(job.error_detail) <= 500
        (attempt,) = queue.attempts(job_id)
        assert attempt.error_detail and len(attempt.error_detail) <= 500
    (attempt,) = queue.attempts(a)
    assert "END" in (queue.traceback(attempt) or "")  # the full text is kept outside the row


# -- the timeline of a job ------------------------------------------------------------------


def test_event_timeline_of_a_job_that_fails_once(queue: errands.Queue) -> None:
    calls = []

    @queue.task(max_attempts=3, backoff=errands.fixed(0))
    def flaky() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise Boom("first")

    job_id = flaky.enqueue()
    summary = drain(queue)

    events = queue.events(job_id)
    assert [e.event for e in events] == [
        "ENQUEUED",
        "CLAIMED",
        "RETRY_SCHEDULED",
        "CLAIMED",
        "SUCCEEDED",
    ]
    assert [e.actor for e in events] == ["api"] + [summary.worker_id] * 4
    assert [e.detail["attempt"] for e in events[1:]] == [1, 1, 2, 2]
    assert events[2].detail["error_code"] == "INTERNAL:Boom"
    assert [e.ts for e in events] == sorted(e.ts for e in events)  # type: ignore[type-var]
    assert all(e.job_id == job_id for e in events)


# -- handlers: async, ctx -----------------------------------------------------------------------


def test_async_handlers_run_and_store_results(queue: errands.Queue) -> None:
    @queue.task
    async def fetch(url: str) -> dict[str, Any]:
        await asyncio.sleep(0.001)
        return {"url": url, "status": 200}

    @queue.task
    def sync_one() -> str:
        return "sync"

    ids = [fetch.enqueue(url=f"https://example.com/{n}") for n in range(5)]
    sync_id = sync_one.enqueue()
    drain(queue)
    for n, job_id in enumerate(ids):
        job = queue.get(job_id)
        assert job is not None and job.status == "succeeded"
        assert job.result == {"url": f"https://example.com/{n}", "status": 200}
    assert get_job(queue, sync_id).result == "sync"


def test_async_handler_failure_is_retried_and_classified(queue: errands.Queue) -> None:
    @queue.task(max_attempts=2, backoff=errands.fixed(0))
    async def broken() -> None:
        await asyncio.sleep(0)
        raise Boom("async")

    job_id = broken.enqueue()
    drain(queue)
    job = queue.get(job_id)
    assert job is not None and (job.status, job.attempts, job.error_code) == (
        "failed",
        2,
        "INTERNAL:Boom",
    )


def test_a_handler_with_ctx_sees_its_job_id_and_attempt(queue: errands.Queue) -> None:
    seen: list[tuple[int, int, str]] = []

    @queue.task(max_attempts=3, backoff=errands.fixed(0))
    def with_ctx(ctx: errands.JobContext, word: str) -> None:
        seen.append((ctx.job_id, ctx.attempt, word))
        if ctx.attempt == 1:
            raise Boom("again")

    @queue.task
    async def async_ctx(ctx: errands.JobContext) -> int:
        return ctx.job_id

    job_id = with_ctx.enqueue(word="hi")
    async_id = async_ctx.enqueue()
    drain(queue)
    assert seen == [(job_id, 1, "hi"), (job_id, 2, "hi")]
    assert get_job(queue, async_id).result == async_id


# -- burst, types, queues -------------------------------------------------------------------


def test_burst_returns_after_draining(queue: errands.Queue) -> None:
    failed = threading.Event()

    @queue.task(max_attempts=2, backoff=errands.fixed(0))
    def work(n: int) -> int:
        if n == 0 and not failed.is_set():
            failed.set()
            raise Boom("retry me")
        return n

    ids = [work.enqueue(n=n) for n in range(20)]
    summary = drain(queue)
    assert [get_job(queue, i).status for i in ids] == ["succeeded"] * 20
    assert [get_job(queue, i).result for i in ids] == list(range(20))
    assert (summary.succeeded, summary.retried, summary.claimed) == (20, 1, 21)
    assert drain(queue).claimed == 0  # nothing left: returns at once


def test_burst_runs_a_retry_that_falls_due_during_the_drain(queue: errands.Queue) -> None:
    failed_once = threading.Event()

    @queue.task(max_attempts=2, backoff=errands.fixed(0.3))
    def flaky() -> str:
        if not failed_once.is_set():
            failed_once.set()
            raise Boom("first")
        return "second time lucky"

    @queue.task
    def slow(flaky_id: int) -> None:
        # Stay running until flaky's retry is recorded and due: burst must then still run it.
        failed_once.wait(30)

        def retry_due() -> bool:
            job = queue.get(flaky_id)
            assert job is not None and job.run_at is not None
            if job.attempts >= 2:  # the worker already took the retry while we ran: fine too
                return True
            return job.status == "queued" and job.run_at.timestamp() < time.time()

        wait_for(retry_due, what="flaky's retry to fall due")

    flaky_id = flaky.enqueue()
    slow.enqueue(flaky_id=flaky_id)
    drain(queue)
    job = queue.get(flaky_id)
    assert job is not None and (job.status, job.attempts) == ("succeeded", 2)


def test_burst_leaves_a_future_job_for_later(
    clocked_queue: errands.Queue, clock: FixedClock
) -> None:
    ran: list[int] = []

    @clocked_queue.task
    def later() -> None:
        ran.append(1)

    job_id = later.with_options(delay=60).enqueue()
    drain(clocked_queue)
    assert ran == [] and get_job(clocked_queue, job_id).status == "queued"
    clock.advance(60)
    drain(clocked_queue)
    assert ran == [1] and get_job(clocked_queue, job_id).status == "succeeded"


def test_worker_claims_only_types_it_has_handlers_for(make_queue: MakeQueue) -> None:
    producer = make_queue()
    mine = producer.enqueue("mine", {})
    theirs = producer.enqueue("theirs", {})
    worker = make_queue()

    @worker.task(name="mine")
    def handles_mine() -> None: ...

    summary = drain(worker)
    assert summary.claimed == 1
    assert get_job(worker, mine).status == "succeeded"
    job = worker.get(theirs)
    assert job is not None and (job.status, job.attempts) == ("queued", 0)


def test_worker_claims_only_its_queues(queue: errands.Queue) -> None:
    @queue.task(queue="emails")
    def send() -> None: ...

    @queue.task
    def report() -> None: ...

    email = send.enqueue()
    other = report.enqueue()
    rerouted = queue.enqueue("send", {}, queue="bulk")
    drain(queue, queues=["emails"])
    assert [get_job(queue, i).status for i in (email, other, rerouted)] == [
        "succeeded",
        "queued",
        "queued",
    ]
    drain(queue, queues=["default", "bulk"])
    assert {get_job(queue, i).status for i in (email, other, rerouted)} == {"succeeded"}


def test_a_queue_without_tasks_cannot_run_a_worker(queue: errands.Queue) -> None:
    with pytest.raises(errands.ConfigurationError, match="no tasks"):
        queue.run_worker(burst=True)
