"""The worker's control loop one step at a time: ``Worker.tick(now)`` driven with a fake clock
(the Queue's wall clock and the worker's monotonic clock are the same ``FixedClock``), so
heartbeats, timeouts, retries and rescues happen at a chosen ``now`` instead of after real
waits. Handlers still run on the executor's real threads; a test waits for their outcome
before the next step."""

from __future__ import annotations

import os
import shutil
import sqlite3
import threading
from collections.abc import Callable
from typing import Any

import pytest

import errands
from errands.worker.db import Trouble
from errands.worker.loop import Worker
from helpers.support import FixedClock, claim, event_names, sqlite_only, stepped, wait_for

MakeQueue = Callable[..., errands.Queue]


def outcome_ready(worker: Worker) -> None:
    """Wait (real time) until the running handler has handed its outcome back."""
    wait_for(lambda: worker.executor.done, timeout=30, what="the handler's outcome")


def test_one_step_claims_and_the_next_records_the_outcome(
    make_queue: MakeQueue, clock: FixedClock
) -> None:
    q = make_queue(clock=clock)

    @q.task
    def add(a: int, b: int) -> int:
        return a + b

    job_id = add.enqueue(a=2, b=3)
    with stepped(q, clock) as worker:
        worker.tick(clock.now)
        assert worker.summary.claimed == 1
        outcome_ready(worker)
        job = q.get(job_id)
        assert job is not None and job.status == "running"  # not recorded before a step
        worker.tick(clock.now)
        job = q.get(job_id)
        assert job is not None and job.status == "succeeded" and job.result == 5
        assert job.finished_at is not None and job.finished_at.timestamp() == clock.now


def test_leases_are_renewed_at_the_heartbeat_and_not_before(
    make_queue: MakeQueue, clock: FixedClock
) -> None:
    q = make_queue(clock=clock, lease_seconds=8, heartbeat_seconds=2)
    started, release = threading.Event(), threading.Event()

    @q.task
    def hold() -> None:
        started.set()
        release.wait(30)

    job_id = hold.enqueue()
    t0 = clock.now

    def lease_expires() -> float:
        job = q.get(job_id)
        assert job is not None and job.lease_expires_at is not None
        return job.lease_expires_at.timestamp()

    with stepped(q, clock) as worker:
        worker.tick(clock.now)
        assert started.wait(30)
        assert lease_expires() == t0 + 8
        clock.advance(1.5)
        worker.tick(clock.now)
        assert lease_expires() == t0 + 8  # not due yet
        clock.advance(0.5)
        worker.tick(clock.now)
        assert lease_expires() == t0 + 2 + 8
        release.set()
        outcome_ready(worker)
        worker.tick(clock.now)
        job = q.get(job_id)
        assert job is not None and job.status == "succeeded"


def test_a_sync_handler_past_its_timeout_is_failed_at_that_moment(
    make_queue: MakeQueue, clock: FixedClock
) -> None:
    q = make_queue(clock=clock)
    started, release = threading.Event(), threading.Event()

    @q.task(timeout=5, max_attempts=1)
    def stuck() -> None:
        started.set()
        release.wait(30)

    job_id = stuck.enqueue()
    try:
        with stepped(q, clock) as worker:
            worker.tick(clock.now)
            assert started.wait(30)
            clock.advance(4.9)
            worker.tick(clock.now)
            worker.tick(clock.now)
            job = q.get(job_id)
            assert job is not None and job.status == "running"
            clock.advance(0.1)
            worker.tick(clock.now)  # the timeout fires: its outcome is queued for the batch
            worker.tick(clock.now)  # and recorded
            job = q.get(job_id)
            assert job is not None and job.status == "failed"
            assert job.error_code == "TIMEOUT:JOB"
            assert job.finished_at is not None and job.finished_at.timestamp() == clock.now
            assert worker.summary.failed == 1
    finally:
        release.set()  # the abandoned thread finishes; its result is dropped


def test_a_retry_is_claimed_when_its_backoff_is_over(
    make_queue: MakeQueue, clock: FixedClock
) -> None:
    q = make_queue(clock=clock)
    runs: list[int] = []

    @q.task(max_attempts=2, backoff=lambda attempt: 30.0)
    def flaky(ctx: errands.JobContext) -> str:
        runs.append(ctx.attempt)
        if ctx.attempt == 1:
            raise errands.JobError("UPSTREAM:DOWN", "try later")
        return "ok"

    job_id = flaky.enqueue()
    t0 = clock.now
    with stepped(q, clock) as worker:
        worker.tick(clock.now)
        outcome_ready(worker)
        worker.tick(clock.now)
        job = q.get(job_id)
        assert job is not None and job.status == "queued" and job.error_code == "UPSTREAM:DOWN"
        assert job.run_at is not None and job.run_at.timestamp() == t0 + 30
        assert worker.summary.retried == 1
        clock.advance(29.9)
        worker.tick(clock.now)
        assert runs == [1]  # not due yet
        clock.advance(0.1)
        worker.tick(clock.now)
        outcome_ready(worker)
        worker.tick(clock.now)
        assert runs == [1, 2]
        job = q.get(job_id)
        assert job is not None and job.status == "succeeded" and job.result == "ok"


def test_the_leader_rescues_a_dead_workers_job_once_its_lease_ran_out(
    make_queue: MakeQueue, clock: FixedClock
) -> None:
    q = make_queue(clock=clock, lease_seconds=10)
    ran: list[int] = []

    @q.task
    def orphan(ctx: errands.JobContext) -> None:
        ran.append(ctx.attempt)

    job_id = orphan.enqueue()
    (held,) = claim(q, ["orphan"], worker_id="ghost", lease_seconds=10)
    assert held.id == job_id
    with stepped(q, clock) as worker:
        worker.tick(clock.now)  # becomes the rescuer; the ghost's lease is still good
        assert worker._maintenance.leading["rescue"]
        job = q.get(job_id)
        assert job is not None and job.status == "running" and job.worker_id == "ghost"
        clock.advance(9.0)  # a sweep (every 5 s with this lease) finds the lease still good
        worker.tick(clock.now)
        job = q.get(job_id)
        assert job is not None and job.status == "running"
        clock.advance(4.9)  # the lease ran out at +10, but the next sweep is at +14
        worker.tick(clock.now)
        job = q.get(job_id)
        assert job is not None and job.status == "running"
        clock.advance(0.1)
        worker.tick(clock.now)
        job = q.get(job_id)
        assert job is not None and "RECOVERED" in event_names(q, job_id)
        # Queued again, and the rescue's wake-up (docs/architecture.md) may already have let
        # this worker claim it: never the ghost's attempt.
        assert job.status == "queued" or (job.status == "running" and job.attempts == 2)
        clock.advance(1.0)  # the next poll claims it (a wake-up could come sooner)

        def succeeded() -> bool:
            worker.tick(clock.now)
            done = q.get(job_id)
            return done is not None and done.status == "succeeded"

        wait_for(succeeded, timeout=30, what="the rescued job to run again and succeed")
        assert ran == [2]


def test_a_burst_step_returns_none_once_nothing_is_left(
    make_queue: MakeQueue, clock: FixedClock
) -> None:
    q = make_queue(clock=clock)

    @q.task
    def once() -> None:
        pass

    once.enqueue()
    with stepped(q, clock, burst=True) as worker:
        assert worker.tick(clock.now) is not None
        outcome_ready(worker)
        steps = 0
        while worker.tick(clock.now) is not None:
            steps += 1
            assert steps < 10, "a drained burst keeps stepping"
        assert worker.summary.succeeded == 1


def test_contention_is_counted_survived_and_reported(
    make_queue: MakeQueue, clock: FixedClock, db_url: str
) -> None:
    sqlite_only(db_url, "another connection holds SQLite's write lock")
    q = make_queue(clock=clock, busy_timeout=0.05, heartbeat_seconds=2)

    @q.task
    def quick() -> None:
        pass

    job_id = quick.enqueue()
    with stepped(q, clock) as worker:
        blocker = sqlite3.connect(db_url, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")
        try:
            worker.tick(clock.now)  # the claim waits out the busy timeout and is skipped
        finally:
            blocker.rollback()
            blocker.close()
        assert worker.summary.claimed == 0
        assert worker.db.counts[Trouble.CONTENTION] >= 1
        assert worker.db.counts[Trouble.REFUSED] == 0
        clock.advance(2.0)  # the next step claims and the heartbeat reports the counts
        worker.tick(clock.now)
        outcome_ready(worker)
        worker.tick(clock.now)
        job = q.get(job_id)
        assert job is not None and job.status == "succeeded"
        seen = q.backend.worker_counters()
        assert seen["db_busy"] >= 1 and seen["db_errors"] == seen["db_busy"]


def test_a_replaced_database_file_stops_the_step_and_is_counted(
    make_queue: MakeQueue, clock: FixedClock, db_url: str, tmp_path: Any
) -> None:
    sqlite_only(db_url, "a database file renamed over")
    q = make_queue(clock=clock)

    @q.task
    def quick() -> None:
        pass

    worker = Worker(q, concurrency=1, handle_signals=False, monotonic=clock)
    worker.start()
    try:
        worker.tick(clock.now)
        other = str(tmp_path / "restored.db")
        shutil.copyfile(db_url, other)
        os.replace(other, db_url)  # a restore renamed over the live file
        clock.advance(60.0)  # maintenance, which checks the file, is due
        with pytest.raises(errands.DatabaseReplacedError):
            worker.tick(clock.now)
        assert worker.db.counts[Trouble.GONE] == 1
    finally:
        worker.stop()
        worker.close()


def test_a_supervised_worker_stops_gracefully_once_its_supervisor_is_gone(
    make_queue: MakeQueue, clock: FixedClock
) -> None:
    """The fallback beside PR_SET_PDEATHSIG (tests/runtime/test_seams.py kills a real
    supervisor): a supervised worker whose parent pid changed stops at its next check."""
    q = make_queue(clock=clock)

    @q.task
    def noop() -> None:
        return None

    with stepped(q, clock, supervised=True) as worker:
        assert worker.tick(clock.now) is not None  # its parent is the one it started with
        worker._parent = os.getppid() + 1_000_000  # as if reparented: no such parent
        clock.advance(1.0)  # the parent is checked with the cancel checks, every second
        worker.tick(clock.now)
        assert worker.tick(clock.now) is None  # asked to stop gracefully


def test_a_full_worker_sleeps_until_a_handler_finishes_instead_of_spinning(
    make_queue: MakeQueue, clock: FixedClock
) -> None:
    """Holding all the jobs it may, a worker past its poll time has nothing to claim: its
    step asks for a real sleep (a finishing handler wakes it), not zero — which spun the
    loop, taking the GIL from the handlers it waited for."""
    q = make_queue(clock=clock, poll_interval=1.0)
    release = threading.Event()

    @q.task
    def hold() -> None:
        release.wait(30)

    for _ in range(5):
        hold.enqueue()
    with stepped(q, clock) as worker:
        worker.tick(clock.now)
        assert 0 < worker.summary.claimed < 5  # all it may hold; the rest wait
        clock.advance(5.0)  # past the poll interval
        pause = worker.tick(clock.now)
        assert pause is not None and pause > 0
        release.set()
