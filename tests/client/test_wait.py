"""``q.wait`` / ``await q.wait_async``: return once a job is final (a job with attempts left is
not), time out with ``WaitTimeout``, are woken by the database's notifications — from another
process too — and never block an event loop."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import errands
from errands.worker.loop import Worker
from helpers.support import is_postgres, wait_for

PROCS = Path(__file__).parents[1] / "procs"


@pytest.fixture
def running_worker() -> Iterator[Callable[[errands.Queue], Worker]]:
    """Start a worker (burst=False) on a thread; every one is stopped after the test."""
    started: list[tuple[Worker, threading.Thread]] = []

    def start(q: errands.Queue) -> Worker:
        worker = Worker(q, handle_signals=False)
        thread = threading.Thread(target=worker.run, daemon=True)
        thread.start()
        started.append((worker, thread))
        return worker

    yield start
    for worker, thread in started:
        worker.stop()
        thread.join(30)


def test_wait_returns_the_job_once_a_worker_finished_it(
    make_queue: Callable[..., errands.Queue],
    running_worker: Callable[[errands.Queue], Worker],
) -> None:
    worker_q = make_queue()

    @worker_q.task
    def double(n: int) -> int:
        return 2 * n

    producer = make_queue(poll_interval=30)  # only a wake-up can end the wait in time
    job_id = producer.enqueue("double", {"n": 21})
    running_worker(worker_q)
    job = producer.wait(job_id, timeout=20)
    assert (job.id, job.status, job.result) == (job_id, "succeeded", 42)


def test_a_job_with_attempts_left_is_not_final(
    make_queue: Callable[..., errands.Queue],
    running_worker: Callable[[errands.Queue], Worker],
) -> None:
    q = make_queue()

    @q.task(max_attempts=3, backoff=errands.fixed(0))
    def flaky(ctx: errands.JobContext) -> int:
        if ctx.attempt < 3:
            raise RuntimeError("not yet")
        return ctx.attempt

    job_id = flaky.enqueue()
    running_worker(q)
    job = make_queue().wait(job_id, timeout=20)
    assert (job.status, job.attempts, job.result) == ("succeeded", 3, 3)
    assert [a.status for a in q.attempts(job_id)] == ["failed", "failed", "succeeded"]


def test_wait_returns_failed_and_cancelled_jobs(
    make_queue: Callable[..., errands.Queue],
    running_worker: Callable[[errands.Queue], Worker],
) -> None:
    q = make_queue()

    @q.task(max_attempts=1)
    def bad() -> None:
        raise ValueError("no")

    failed_id = bad.enqueue()
    cancelled_id = q.enqueue("bad", {}, delay=3600)
    q.cancel(cancelled_id)
    assert q.wait(cancelled_id, timeout=0).status == "cancelled"  # already final: at once
    running_worker(q)
    job = q.wait(failed_id, timeout=20)
    assert (job.status, job.error_code) == ("failed", "INTERNAL:ValueError")


def test_wait_times_out_with_wait_timeout_and_leaves_the_job(queue: errands.Queue) -> None:
    job_id = queue.enqueue("nobody_handles_this", {})
    with pytest.raises(errands.WaitTimeout, match=rf"job {job_id} is still queued") as raised:
        queue.wait(job_id, timeout=0.2)
    assert isinstance(raised.value, TimeoutError)
    assert isinstance(raised.value, errands.ErrandsError)
    job = queue.get(job_id)
    assert job is not None and job.status == "queued"


def test_wait_on_an_unknown_job_says_so(queue: errands.Queue) -> None:
    with pytest.raises(errands.JobNotFoundError, match="no job with id 999"):
        queue.wait(999, timeout=1)


def test_wait_refuses_a_negative_timeout(queue: errands.Queue) -> None:
    job_id = queue.enqueue("t", {})
    with pytest.raises(errands.ConfigurationError, match="timeout must be >= 0"):
        queue.wait(job_id, timeout=-1)


def test_wait_async_does_not_block_the_event_loop(
    make_queue: Callable[..., errands.Queue],
) -> None:
    q = make_queue(poll_interval=30)
    job_id = q.enqueue("t", {})
    ticks_before_return: list[int] = []

    async def main() -> errands.Job:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        async def cancel_later() -> None:
            while ticks < 5:  # the loop runs while wait_async is waiting
                await asyncio.sleep(0.01)
            await asyncio.to_thread(q.cancel, job_id)

        tick = asyncio.create_task(ticker())
        canceller = asyncio.create_task(cancel_later())
        job = await q.wait_async(job_id, timeout=20)
        ticks_before_return.append(ticks)
        tick.cancel()
        await canceller
        await q.aclose()
        return job

    job = asyncio.run(main())
    assert job.status == "cancelled"
    assert ticks_before_return[0] >= 5


def test_wait_async_times_out(queue: errands.Queue) -> None:
    job_id = queue.enqueue("nobody_handles_this", {})

    async def main() -> None:
        with pytest.raises(errands.WaitTimeout):
            await queue.wait_async(job_id, timeout=0.2)

    asyncio.run(main())


def test_subscriptions_wake_on_finished_and_enqueued_jobs(queue: errands.Queue) -> None:
    job_id = queue.enqueue("t", {}, delay=3600)
    with queue.subscribe_wakeups("finished", job_ids=[job_id]) as finished:
        with queue.subscribe_wakeups("enqueued") as enqueued:
            queue.enqueue("t", {})
            assert enqueued.wait(20)
            queue.cancel(job_id)
            assert finished.wait(20)


def test_subscribe_wakeups_refuses_an_unknown_kind(queue: errands.Queue) -> None:
    with pytest.raises(errands.ConfigurationError, match="unknown wake-up kind"):
        queue.subscribe_wakeups("started")


def test_postgres_notifies_once_per_finishing_transaction_with_the_ids(pg_url: str) -> None:
    """The completion path pays one NOTIFY per batch of outcomes, not one per job."""
    import psycopg

    from errands.backends.base import Succeeded
    from helpers.support import claim

    with errands.Queue(pg_url) as q:
        ids = q.enqueue_many([("t", {}) for _ in range(3)])
        held = claim(q, ["t"], limit=3)
        with psycopg.connect(pg_url, autocommit=True) as listener:
            listener.execute("LISTEN errands_finished")
            outcomes = [Succeeded(j.id, j.attempt, time.time(), None) for j in held]
            assert q.backend.finish(outcomes, "w1", time.time()) == [True] * 3
            notes = list(listener.notifies(timeout=2))
    assert [sorted(int(i) for i in n.payload.split(",")) for n in notes] == [sorted(ids)]


# -- across processes -------------------------------------------------------------------------


def test_a_producer_process_waits_on_a_job_run_by_a_worker_process(
    db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """This process enqueues and waits; another runs the job. Both poll only every 30 s, so
    only the wake-up paths (NOTIFY; SQLite's listener) can make this quick. The delay from
    the outcome's commit to wait() returning is printed, not asserted (shared machine)."""
    err = (tmp_path / "worker.err").open("wb")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(PROCS.parent.parent / "src")])}
    worker = subprocess.Popen(
        [sys.executable, str(PROCS / "wait_worker.py"), db_url], stderr=err, env=env
    )
    try:
        with errands.Queue(db_url, poll_interval=30) as q:
            wait_for(
                lambda: q.stats()["workers"], timeout=30, what="the worker process to register"
            )
            delays: list[float] = []
            for fail_times in (0, 0, 2, 0, 1):
                job_id = q.enqueue("flaky", {"fail_times": fail_times})
                job = q.wait(job_id, timeout=20)
                returned = time.time()
                assert (job.status, job.attempts) == ("succeeded", fail_times + 1)
                assert job.result == {"attempt": fail_times + 1}
                assert job.finished_at is not None
                delays.append(returned - job.finished_at.timestamp())

            # A job nobody runs: the wait times out cleanly and the job is left queued.
            stuck = q.enqueue("nobody_handles_this", {})
            with pytest.raises(errands.WaitTimeout):
                q.wait(stuck, timeout=0.5)
            still = q.get(stuck)
            assert still is not None and still.status == "queued"
    finally:
        worker.terminate()
        code = worker.wait(30)
        err.close()
    assert code == 0, (tmp_path / "worker.err").read_text()
    ms = sorted(d * 1000 for d in delays)
    backend = "postgres" if is_postgres(db_url) else "sqlite"
    with capsys.disabled():
        print(
            f"\n[figures] wait() return after the outcome commit ({backend}): "
            f"median {ms[len(ms) // 2]:.1f} ms, max {ms[-1]:.1f} ms over {len(ms)} jobs"
        )
