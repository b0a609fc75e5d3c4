"""Graceful shutdown, timeouts, cancellation, startup cleanup, transactional completion, a job
that kills its worker, and leader election — each with real worker processes."""

from __future__ import annotations

import signal
import time

import errands

from .conftest import (
    KILL_EXIT,
    Cluster,
    Proc,
    assert_consistent,
    assert_integrity,
    event_names,
    phases,
    raw_connection,
    rows,
    starts,
    wait_for,
)


def job_status(queue: errands.Queue, job_id: int) -> str:
    job = queue.get(job_id)
    assert job is not None
    return job.status


def wait_status(queue: errands.Queue, job_id: int, status: str, timeout: float = 20) -> None:
    wait_for(lambda: job_status(queue, job_id) == status, timeout, f"job {job_id} to be {status}")


def wait_phase(cluster: Cluster, seq: int, phase: str, attempt: int = 1) -> None:
    wait_for(
        lambda: (attempt, phase) in phases(cluster.ledger(), seq),
        20,
        f"job seq={seq} attempt {attempt} to reach {phase!r}",
    )


def wait_lost(proc: Proc, code: int) -> None:
    assert proc.wait(30) == code, proc.stderr()


# -- graceful shutdown --------------------------------------------------------------------


def test_sigterm_finishes_running_jobs_and_releases_prefetched_ones(
    cluster: Cluster, queue: errands.Queue
) -> None:
    ids = [queue.enqueue("slow_job", {"seq": s, "seconds": 1.5}) for s in range(6)]
    worker = cluster.worker("--concurrency", "2")
    wait_for(lambda: len(starts(cluster.ledger())) == 2, 20, "two jobs to start")
    held = {r[0] for r in rows(cluster.db_url, "SELECT id FROM jobs WHERE status = 'running'")}
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0, worker.stderr()
    worker.assert_clean_log()

    ledger = cluster.ledger()
    started = {e["job"] for e in starts(ledger)}
    assert len(started) == 2 and started < held
    assert {e["job"] for e in ledger if e["phase"] == "end"} == started, "running jobs finished"
    released = held - started
    assert released, "the worker held prefetched jobs that had not started"
    summary = worker.summary()
    assert (summary["succeeded"], summary["released"]) == (2, len(released))
    for job_id in ids:
        job = queue.get(job_id)
        assert job is not None
        if job_id in started:
            assert (job.status, job.attempts) == ("succeeded", 1)
        elif job_id in released:
            assert (job.status, job.attempts, job.worker_id) == ("queued", 0, None)
            assert queue.attempts(job_id) == []
            assert event_names(queue, job_id) == ["ENQUEUED", "CLAIMED", "RELEASED"]
        else:
            assert (job.status, job.attempts) == ("queued", 0)
            assert event_names(queue, job_id) == ["ENQUEUED"]
    assert_consistent(cluster.db_url)


def test_second_sigterm_stops_at_once_and_leases_recover(
    cluster: Cluster, queue: errands.Queue
) -> None:
    ids = [queue.enqueue("slow_job", {"seq": s, "seconds": 60}) for s in range(2)]
    worker = cluster.worker("--concurrency", "2")
    wait_for(lambda: len(starts(cluster.ledger())) == 2, 20, "both jobs to start")
    worker.signal(signal.SIGTERM)
    wait_for(lambda: "finishing running jobs" in worker.stderr(), 10, "the first SIGTERM")
    worker.signal(signal.SIGTERM)
    # Far less than the 60 s the handlers would need: the second signal does not wait.
    assert worker.wait(15) == 0, worker.stderr()
    assert worker.summary()["interrupted"] is True
    assert all(job_status(queue, j) == "running" for j in ids)

    # The worker said it stopped, so no startup cleanup: the lease rescuer brings them back.
    fresh = cluster.worker()
    for job_id in ids:
        wait_status(queue, job_id, "succeeded")
        recovered = [e for e in queue.events(job_id) if e.event == "RECOVERED"]
        assert [e.detail["reason"] for e in recovered] == ["lease_expired"]
        assert [a.status for a in queue.attempts(job_id)] == ["lost", "succeeded"]
    cluster.wait_registered(fresh)
    assert fresh.stop() == 0
    assert_consistent(cluster.db_url)


# -- timeouts ------------------------------------------------------------------------------


def test_sync_timeout_fails_the_attempt_and_replaces_the_runner(
    cluster: Cluster, queue: errands.Queue
) -> None:
    # seconds=60: the first attempt's thread is still sleeping when the test ends, so the
    # second attempt can only have run on a replacement runner (concurrency is 1).
    # max_attempts is stored with the job at enqueue; this test's Queue has no tasks, so say it.
    always = queue.enqueue("sync_timeout_job", {"seq": 1, "seconds": 60}, max_attempts=2)
    once = queue.enqueue(
        "sync_timeout_job", {"seq": 2, "seconds": 60, "slow_attempts": 1}, max_attempts=2
    )
    worker = cluster.worker("--concurrency", "1")
    wait_status(queue, always, "failed")
    wait_status(queue, once, "succeeded")

    job = queue.get(always)
    assert job is not None
    assert (job.attempts, job.error_code) == (2, "TIMEOUT:JOB")
    attempts = queue.attempts(always)
    assert [(a.status, a.error_code) for a in attempts] == [("failed", "TIMEOUT:JOB")] * 2
    names = event_names(queue, always)
    assert names == ["ENQUEUED", "CLAIMED", "RETRY_SCHEDULED", "CLAIMED", "FAILED"], names
    assert [(a.status, a.error_code) for a in queue.attempts(once)] == [
        ("failed", "TIMEOUT:JOB"),
        ("succeeded", None),
    ]
    ledger = phases(cluster.ledger(), 2)
    assert (2, "end") in ledger and (1, "end") not in ledger, ledger
    cluster.wait_registered(worker)
    assert worker.stop() == 0, worker.stderr()
    worker.assert_clean_log()
    assert_consistent(cluster.db_url)


def test_async_timeout_cancels_the_handler(cluster: Cluster, queue: errands.Queue) -> None:
    job_id = queue.enqueue("async_timeout_job", {"seq": 1, "seconds": 60}, max_attempts=2)
    worker = cluster.worker("--concurrency", "1")
    wait_status(queue, job_id, "failed")
    job = queue.get(job_id)
    assert job is not None
    assert (job.attempts, job.error_code) == (2, "TIMEOUT:JOB")
    assert [(a.status, a.error_code) for a in queue.attempts(job_id)] == [
        ("failed", "TIMEOUT:JOB")
    ] * 2
    names = event_names(queue, job_id)
    assert names == ["ENQUEUED", "CLAIMED", "RETRY_SCHEDULED", "CLAIMED", "FAILED"]
    wait_phase(cluster, 1, "cancelled", attempt=2)
    assert [p for p in phases(cluster.ledger(), 1) if p[1] == "cancelled"] == [
        (1, "cancelled"),
        (2, "cancelled"),
    ]
    cluster.wait_registered(worker)
    assert worker.stop() == 0, worker.stderr()
    worker.assert_clean_log()


# -- cancellation --------------------------------------------------------------------------


def test_cancel_queued_job(cluster: Cluster, queue: errands.Queue) -> None:
    job_id = queue.enqueue("ledger_job", {"seq": 1})
    assert queue.cancel(job_id) == "cancelled"
    worker = cluster.worker("--burst")
    assert worker.wait(30) == 0, worker.stderr()
    job = queue.get(job_id)
    assert job is not None
    assert (job.status, job.error_code, job.attempts) == ("cancelled", "CANCELLED:BY_USER", 0)
    assert event_names(queue, job_id) == ["ENQUEUED", "CANCELLED"]
    assert cluster.ledger() == []


def test_cancel_running_sync_and_async_jobs(cluster: Cluster, queue: errands.Queue) -> None:
    sync_id = queue.enqueue("cancellable_job", {"seq": 1})
    async_id = queue.enqueue("cancellable_async_job", {"seq": 2})
    worker = cluster.worker("--concurrency", "2")
    wait_phase(cluster, 1, "start")
    wait_phase(cluster, 2, "start")
    assert queue.cancel(sync_id) == "cancel_requested"
    assert queue.cancel(async_id) == "cancel_requested"
    for job_id in (sync_id, async_id):
        wait_status(queue, job_id, "cancelled")
        job = queue.get(job_id)
        assert job is not None
        assert (job.error_code, job.attempts) == ("CANCELLED:BY_USER", 1)
        assert [a.status for a in queue.attempts(job_id)] == ["cancelled"]
        assert event_names(queue, job_id) == [
            "ENQUEUED",
            "CLAIMED",
            "CANCEL_REQUESTED",  # who asked (actor "api" here), then the outcome
            "CANCELLED",
        ]
    assert (1, "saw_cancel") in phases(cluster.ledger(), 1), "ctx.cancelled let it stop"
    assert (1, "cancelled") in phases(cluster.ledger(), 2), "the async task was cancelled"
    cluster.wait_registered(worker)
    assert worker.stop() == 0, worker.stderr()
    worker.assert_clean_log()
    assert_consistent(cluster.db_url)


# -- crashes -------------------------------------------------------------------------------


def test_startup_cleanup_recovers_a_dead_local_workers_job_at_once(
    cluster: Cluster, queue: errands.Queue
) -> None:
    # A 60 s lease: the rescuer would take a minute. The job comes back because the next
    # worker on this host sees the dead pid — the events say so.
    job_id = queue.enqueue("slow_job", {"seq": 1, "seconds": 60})
    dead = cluster.worker("--lease", "60", "--heartbeat", "5")
    wait_phase(cluster, 1, "start")
    dead.kill()
    fresh = cluster.worker("--lease", "60", "--heartbeat", "5")
    wait_status(queue, job_id, "succeeded", timeout=30)
    recovered = [e for e in queue.events(job_id) if e.event == "RECOVERED"]
    assert len(recovered) == 1
    assert recovered[0].detail["reason"] == "startup_cleanup"
    assert str(dead.pid) in recovered[0].detail["worker"]
    attempts = queue.attempts(job_id)
    assert [(a.status, a.error_code) for a in attempts] == [
        ("lost", "LOST:LEASE_EXPIRED"),
        ("succeeded", None),
    ]
    cluster.wait_registered(fresh)
    assert fresh.stop() == 0
    assert_consistent(cluster.db_url)


def create_side_table(url: str) -> None:
    with raw_connection(url) as conn:
        conn.execute("CREATE TABLE side_effects (job_id INTEGER, attempt INTEGER, seq INTEGER)")


def test_transactional_completion_commits_with_the_handlers_writes(
    cluster: Cluster, queue: errands.Queue
) -> None:
    create_side_table(cluster.db_url)
    job_id = queue.enqueue("txn_job", {"seq": 1})
    worker = cluster.worker("--burst")
    assert worker.wait(30) == 0, worker.stderr()
    job = queue.get(job_id)
    assert job is not None
    assert (job.status, job.attempts, job.result) == ("succeeded", 1, {"seq": 1})
    assert rows(cluster.db_url, "SELECT job_id, attempt FROM side_effects") == [(job_id, 1)]
    assert event_names(queue, job_id).count("SUCCEEDED") == 1
    assert worker.summary()["succeeded"] == 0, "the worker recorded nothing more for it"
    assert_consistent(cluster.db_url)


def test_crash_before_commit_leaves_neither_row_nor_completion(
    cluster: Cluster, queue: errands.Queue
) -> None:
    create_side_table(cluster.db_url)
    job_id = queue.enqueue("txn_job", {"seq": 1, "crash_attempts": 1})
    crashed = cluster.worker("--burst")
    wait_lost(crashed, KILL_EXIT)
    assert rows(cluster.db_url, "SELECT * FROM side_effects") == []
    job = queue.get(job_id)
    assert job is not None
    assert (job.status, job.attempts, job.result) == ("running", 1, None)
    assert "SUCCEEDED" not in event_names(queue, job_id)
    assert_integrity(cluster.db_url)

    retry = cluster.worker("--burst")
    assert retry.wait(30) == 0, retry.stderr()
    job = queue.get(job_id)
    assert job is not None
    assert (job.status, job.attempts) == ("succeeded", 2)
    assert rows(cluster.db_url, "SELECT job_id, attempt FROM side_effects") == [(job_id, 2)]
    assert [e["attempt"] for e in starts(cluster.ledger())] == [1, 2], "ran exactly once more"
    assert_consistent(cluster.db_url)


def test_job_that_kills_its_worker_ends_failed(cluster: Cluster, queue: errands.Queue) -> None:
    job_id = queue.enqueue("killer_job", {"seq": 1}, max_attempts=3)
    codes = []
    for _ in range(6):
        worker = cluster.worker("--burst")
        codes.append(worker.wait(30))
        if job_status(queue, job_id) == "failed":
            break
    assert codes == [KILL_EXIT] * 3 + [0], codes
    job = queue.get(job_id)
    assert job is not None
    assert (job.attempts, job.error_code) == (3, "LOST:LEASE_EXPIRED")
    assert [a.status for a in queue.attempts(job_id)] == ["lost"] * 3
    recovered = [e for e in queue.events(job_id) if e.event == "RECOVERED"]
    assert [e.detail["outcome"] for e in recovered] == ["queued", "queued", "failed"]
    assert len(starts(cluster.ledger())) == 3
    assert_consistent(cluster.db_url)


# -- leader election ------------------------------------------------------------------------


def leader_pids(url: str) -> list[int]:
    """Holders of the rescuer's role (each maintenance service has its own leader row)."""
    holders = rows(url, "SELECT holder FROM maintenance_leases WHERE name = 'rescue'")
    return [int(str(h).rsplit(":", 2)[1]) for (h,) in holders]


def test_one_leader_and_a_clean_handover(cluster: Cluster, queue: errands.Queue) -> None:
    a, b = cluster.worker(), cluster.worker()
    cluster.wait_registered(a)
    cluster.wait_registered(b)
    (leader,) = wait_for(lambda: leader_pids(cluster.db_url), 10, "a leader")
    assert leader in (a.pid, b.pid)
    deadline = time.monotonic() + 2.5  # a few renewals: the same single leader throughout
    while time.monotonic() < deadline:
        assert leader_pids(cluster.db_url) == [leader]
        time.sleep(0.1)

    first, second = (a, b) if leader == a.pid else (b, a)
    assert first.stop() == 0, first.stderr()
    # It resigned on the way out, so the other takes over without waiting for the lease.
    wait_for(lambda: leader_pids(cluster.db_url) == [second.pid], 10, "the other to lead")
    assert second.stop() == 0
    assert rows(cluster.db_url, "SELECT COUNT(*) FROM maintenance_leases") == [(0,)]
