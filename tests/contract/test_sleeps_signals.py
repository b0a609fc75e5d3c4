"""Durable sleeps and signals (docs/durable-steps.md), on both backends with a real worker and
a clock that moves only when told: a sleep ends the run and queues the job for its wake time
without using up an attempt; a wait parks the job ``waiting`` until its signal or timeout."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

import errands
from errands.context import JobContext
from errands.maintenance.rescuer import Rescuer
from errands.metrics import render_metrics
from helpers.support import FixedClock, event_names, get_job


def events(queue: errands.Queue, job_id: int) -> list[str]:
    return event_names(queue, job_id)


def status(queue: errands.Queue, job_id: int) -> str:
    return get_job(queue, job_id).status


def test_a_sleep_ends_the_run_and_resumes_after_it(
    clocked_queue: errands.Queue, clock: FixedClock
) -> None:
    queue = clocked_queue
    ran: list[str] = []

    @queue.task(max_attempts=2, backoff=errands.fixed(10))
    def flow(ctx: JobContext) -> str:
        ctx.step("before", lambda: ran.append("before"))
        ctx.sleep(3600)
        ctx.sleep(0, name="nap")  # already over: returns at once, recorded all the same
        ran.append(f"after{ctx.attempt}")
        if ctx.attempt == 1:
            raise RuntimeError("a failure after the sleep uses the first attempt")
        return "done"

    job_id = flow.enqueue()
    start = clock()
    queue.run_worker(burst=True)
    job = queue.get(job_id)
    assert job is not None and (job.status, job.attempts, job.max_attempts) == ("queued", 0, 2)
    assert job.run_at is not None and job.run_at.timestamp() == pytest.approx(start + 3600)
    assert events(queue, job_id)[-1] == "SLEEPING"
    assert queue.attempts(job_id) == []  # the claim's attempt was given back
    clock.advance(1800)
    queue.run_worker(burst=True)  # not due yet
    assert ran == ["before"]
    clock.advance(1800)
    queue.run_worker(burst=True)  # resumes, fails once (attempt 1), retried 10 s later
    assert status(queue, job_id) == "queued"
    clock.advance(10)
    queue.run_worker(burst=True)
    job = queue.get(job_id)
    assert job is not None and (job.status, job.attempts) == ("succeeded", 2)
    assert ran == ["before", "after1", "after2"]
    assert [(s.kind, s.name) for s in queue.steps(job_id)] == [
        ("step", "before"),
        ("sleep", "sleep"),
        ("sleep", "nap"),
    ]


@pytest.mark.timeout(60)  # the bug this guards against made a burst worker loop for good
def test_a_sleep_ends_at_its_wake_time_whatever_the_clocks_sub_microsecond_part(
    clocked_queue: errands.Queue, clock: FixedClock
) -> None:
    """PostgreSQL rounds times to the microsecond: a clock at …0.4047718 made the stored
    wake time …0.404772, so the claim found the job due while the handler, comparing the
    exact floats, saw the sleep not yet over and re-parked it — forever with this clock."""
    queue = clocked_queue
    clock.now += 0.4047718
    ran: list[str] = []

    @queue.task()
    def trial(ctx: JobContext) -> None:
        ctx.sleep(3 * 86400)
        ran.append("after")

    job_id = trial.enqueue()
    queue.run_worker(burst=True)
    assert status(queue, job_id) == "queued"
    clock.advance(3 * 86400)
    queue.run_worker(burst=True)
    assert status(queue, job_id) == "succeeded"
    assert ran == ["after"]
    assert events(queue, job_id) == ["ENQUEUED", "CLAIMED", "SLEEPING", "CLAIMED", "SUCCEEDED"]


def test_sleep_refuses_absurd_durations(queue: errands.Queue) -> None:
    @queue.task(max_attempts=1)
    def flow(ctx: JobContext, value: Any) -> None:
        ctx.sleep(float(value) if isinstance(value, str) else value)

    ids = [flow.enqueue(value=v) for v in ("nan", "inf", -1, True)]
    queue.run_worker(burst=True)
    for job_id in ids:
        job = queue.get(job_id)
        assert job is not None and job.status == "failed"
        assert "ctx.sleep takes seconds" in (job.error_detail or "")


def waiter(queue: errands.Queue, timeout: float | None = None) -> Any:
    got: list[Any] = []

    @queue.task()
    def flow(ctx: JobContext) -> Any:
        try:
            first = ctx.wait_for("survey", timeout=timeout)
        except errands.SignalTimeout:
            got.append("timeout")
            return "timed out"
        second = ctx.wait_for("survey", timeout=timeout)
        got.append([first, second])
        return [first, second]

    return flow, got


def test_a_wait_parks_the_job_until_its_signals_arrive(queue: errands.Queue) -> None:
    _, got = waiter(queue)
    job_id = queue.enqueue("flow", {}, unique_key="survey:1")
    queue.signal(job_id, "survey", {"score": 9})  # sent before the job waits: kept
    queue.run_worker(burst=True)  # takes the first, parks on the second
    job = queue.get(job_id)
    assert job is not None and (job.status, job.attempts) == ("waiting", 0)
    assert events(queue, job_id)[-1] == "SIGNAL_WAIT"
    queue.backend.sweep_waiting(queue.clock())  # the dependency sweeper leaves it alone
    assert status(queue, job_id) == "waiting"
    assert queue.signal(name="survey", payload=[1, "two"], unique_key="survey:1") == job_id
    assert status(queue, job_id) == "queued"
    assert events(queue, job_id)[-1] == "SIGNALLED"
    queue.run_worker(burst=True)
    job = queue.get(job_id)
    assert job is not None and (job.status, job.attempts) == ("succeeded", 1)
    assert job.result == [{"score": 9}, [1, "two"]]
    assert got == [[{"score": 9}, [1, "two"]]]
    waits = [s for s in queue.steps(job_id) if s.kind == "wait"]
    assert [(s.name, s.result) for s in waits] == [
        ("survey", {"payload": {"score": 9}}),
        ("survey#2", {"payload": [1, "two"]}),
    ]


def test_a_wait_times_out_once_and_for_every_later_run(
    clocked_queue: errands.Queue, clock: FixedClock
) -> None:
    queue = clocked_queue
    flow, got = waiter(queue, timeout=60)
    job_id = flow.enqueue()
    queue.run_worker(burst=True)
    assert status(queue, job_id) == "waiting"
    rescuer = Rescuer(queue.backend, queue.settings.lease_seconds)
    clock.advance(59)
    rescuer.run_once(clock())
    assert status(queue, job_id) == "waiting"
    clock.advance(2)
    rescuer.run_once(clock())
    assert status(queue, job_id) == "queued"
    queue.run_worker(burst=True)
    job = queue.get(job_id)
    assert job is not None and (job.status, job.result) == ("succeeded", "timed out")
    assert got == ["timeout"]
    # A signal sent now is too late for that wait: the recorded timeout stands.
    with pytest.raises(errands.InvalidTransitionError, match="finished"):
        queue.signal(job_id, "survey")


def test_signals_to_unknown_or_finished_jobs_are_refused(queue: errands.Queue) -> None:
    @queue.task()
    def noop() -> None:
        pass

    done = noop.enqueue()
    queue.run_worker(burst=True)
    with pytest.raises(errands.InvalidTransitionError, match="succeeded"):
        queue.signal(done, "x")
    with pytest.raises(errands.JobNotFoundError):
        queue.signal(999_999, "x")
    with pytest.raises(errands.JobNotFoundError, match="unique_key"):
        queue.signal(name="x", unique_key="nobody")
    with pytest.raises(ValueError, match="NUL"):
        queue.signal(done, "a\x00")
    with pytest.raises(errands.PayloadError):
        queue.signal(done, "x", float("nan"))
    with pytest.raises(ValueError, match="exactly one"):
        queue.signal(name="x")


def test_cancelling_a_sleeping_or_waiting_job_ends_it_at_once(queue: errands.Queue) -> None:
    @queue.task()
    def sleeper(ctx: JobContext) -> None:
        ctx.sleep(3600)

    flow, _ = waiter(queue)
    s, w = sleeper.enqueue(), flow.enqueue()
    queue.run_worker(burst=True)
    assert (status(queue, s), status(queue, w)) == ("queued", "waiting")
    queue.cancel(s)
    queue.cancel(w)
    assert (status(queue, s), status(queue, w)) == ("cancelled", "cancelled")
    with pytest.raises(errands.InvalidTransitionError):
        queue.signal(w, "survey")


def test_stats_count_sleeping_and_waiting_jobs_and_late_waits(
    clocked_queue: errands.Queue, clock: FixedClock
) -> None:
    queue = clocked_queue

    @queue.task()
    def sleeper(ctx: JobContext) -> None:
        ctx.sleep(3600)

    flow, _ = waiter(queue, timeout=60)
    sleeper.enqueue()
    flow.enqueue()
    flow.enqueue()
    queue.run_worker(burst=True)
    counts = {"sleeping": 1, "signal_waiting": 2, "waits_past_timeout": 0}
    assert queue.stats()["durable"] == counts
    metrics = render_metrics(queue).decode()
    assert 'errands_jobs_durable{state="signal_waiting"} 2.0' in metrics
    assert 'errands_jobs_durable{state="sleeping"} 1.0' in metrics
    # No rescuer ran: two minutes past the timeout, both waits are reported late.
    late = queue.backend.durable_counts(clock() + 180, 60.0)
    assert late == {"sleeping": 1, "signal_waiting": 2, "waits_past_timeout": 2}
    assert queue.backend.durable_counts(clock() + 100, 60.0)["waits_past_timeout"] == 0
    assert queue.backend.durable_counts(clock() + 3600, 60.0)["sleeping"] == 0


def test_a_run_asked_to_stop_is_cancelled_rather_than_sleeping(
    make_queue: Callable[..., errands.Queue],
) -> None:
    """A cancel requested while the handler runs wins over the sleep or wait it then reaches:
    the job ends cancelled instead of parking with nobody left to end it."""
    queue = make_queue(heartbeat_seconds=0.05, lease_seconds=5)

    def stop_then(ctx: JobContext) -> None:
        queue.cancel(ctx.job_id)
        deadline = time.monotonic() + 30  # a bound for a hung test, not a timing assertion
        while not ctx.cancelled and time.monotonic() < deadline:
            time.sleep(0.01)

    @queue.task()
    def sleeper(ctx: JobContext) -> None:
        stop_then(ctx)
        ctx.sleep(3600)

    @queue.task()
    async def waiter_async(ctx: JobContext) -> None:
        stop_then(ctx)
        ctx.wait_for("never")

    ids = [sleeper.enqueue(), waiter_async.enqueue()]
    queue.run_worker(burst=True)
    for job_id in ids:
        assert status(queue, job_id) == "cancelled"
        assert "SLEEPING" not in events(queue, job_id)
        assert "SIGNAL_WAIT" not in events(queue, job_id)
