"""Durable steps with real worker processes (docs/durable-steps.md), on both backends: 5-step
jobs whose workers are SIGKILLed at random points resume after their last recorded step
each time; every step with connection= leaves exactly one row of its own effect; a durable
sleep holds no worker."""

from __future__ import annotations

import random
import signal
import time
from collections import defaultdict

import pytest

import errands

from .conftest import Cluster, assert_consistent, raw_connection, rows, wait_for

STEPS = 5
PICKUP_DEADLINE = 3.0  # as tests/runtime/test_wakeup.py: far below the 30 s poll


def create_side_table(url: str) -> None:
    with raw_connection(url) as conn:
        conn.execute("CREATE TABLE side_effects (job_id INTEGER, attempt INTEGER, seq INTEGER)")


def kill_and_resume(cluster: Cluster, queue: errands.Queue, jobs: int, kills: int) -> None:
    url = cluster.db_url
    create_side_table(url)
    ids = [queue.enqueue("steps_job", {"seq": n, "steps": STEPS}) for n in range(jobs)]
    rng = random.Random(33)
    done = 0
    for _ in range(kills):
        worker = cluster.worker("--concurrency", "2")
        cluster.wait_registered(worker)
        time.sleep(rng.uniform(0.02, 0.35))  # somewhere inside a step, or between two
        worker.kill()
        done = sum(1 for (s,) in rows(url, "SELECT status FROM jobs") if s == "succeeded")
        if done == jobs:  # all finished before the kills ran out: start over with more work
            ids += [queue.enqueue("steps_job", {"seq": len(ids), "steps": STEPS})]
            jobs += 1
    final = cluster.worker("--concurrency", "2")

    def all_done() -> bool:
        assert final.alive(), f"the last worker exited:\n{final.stderr()[-3000:]}"
        states = [s for (s,) in rows(url, "SELECT status FROM jobs")]
        return states.count("succeeded") == len(ids)

    try:
        # A bound for a hang, well inside the test's timeout so that what follows is shown.
        wait_for(all_done, 120, "every steps_job to succeed")
    except AssertionError as exc:
        final.signal(signal.SIGUSR1)  # worker_app prints every thread's stack
        time.sleep(1)
        left = rows(
            url, "SELECT id, status, attempts, run_at, lease_expires_at, worker_id FROM jobs"
        )
        steps = rows(url, "SELECT job_id, name, attempt FROM job_steps ORDER BY job_id, seq")
        raise AssertionError(
            f"{exc}; not succeeded: {[r for r in left if r[1] != 'succeeded']}\n"
            f"steps: {steps}\nworkers: {rows(url, 'SELECT id, pid FROM workers')}\n"
            f"the last worker's log:\n{final.stderr()[-6000:]}"
        ) from None
    assert final.stop() == 0

    # Exactly once with connection=: one side_effects row per job and even step.
    effects = rows(url, "SELECT job_id, seq, count(*) FROM side_effects GROUP BY job_id, seq")
    assert sorted((j, s) for j, s, _ in effects) == sorted(
        (j, s) for j in ids for s in range(0, STEPS, 2)
    )
    assert {c for _, _, c in effects} == {1}
    # Each job recorded each step once, and resumed after its last recorded step each time:
    # no step started again in an attempt later than the one that recorded it.
    recorded = {
        (j, int(name[1:])): attempt
        for j, name, attempt in rows(url, "SELECT job_id, name, attempt FROM job_steps")
    }
    assert sorted(recorded) == sorted((j, s) for j in ids for s in range(STEPS))
    ran: dict[tuple[int, int], list[int]] = defaultdict(list)
    for e in cluster.ledger():
        if e["phase"] == "step":
            ran[(e["job"], e["step"])].append(e["attempt"])
    for key, attempts in ran.items():
        assert max(attempts) <= recorded[key], f"step {key} ran after it was recorded"
    resumed = 0
    for job_id in ids:
        job = queue.get(job_id)
        assert job is not None and job.result == list(range(STEPS))
        resumed += job.attempts > 1
    assert resumed, "no kill landed inside a job: the test proved nothing"
    assert_consistent(url)


def test_steps_resume_after_sigkill(cluster: Cluster, queue: errands.Queue) -> None:
    kill_and_resume(cluster, queue, jobs=4, kills=20)


@pytest.mark.slow
def test_steps_resume_after_sigkill_long(cluster: Cluster, queue: errands.Queue) -> None:
    kill_and_resume(cluster, queue, jobs=10, kills=60)


def test_a_durable_sleep_holds_no_worker(cluster: Cluster, queue: errands.Queue) -> None:
    """A concurrency-1 worker runs a second job while the first sleeps 2 s, then resumes it."""
    sleeper = queue.enqueue("sleeper_job", {"seq": 1, "seconds": 2.0})
    worker = cluster.worker("--concurrency", "1")
    cluster.wait_registered(worker)

    def status(job_id: int) -> str:
        job = queue.get(job_id)
        assert job is not None
        return job.status

    wait_for(lambda: status(sleeper) == "queued" and queue.steps(sleeper), 30, "the sleep")
    quick = queue.enqueue("ledger_job", {"seq": 2})
    wait_for(lambda: status(sleeper) == "succeeded", 60, "the sleeper to resume")
    assert worker.stop() == 0
    ledger = cluster.ledger()
    order = [(e["seq"], e["phase"]) for e in sorted(ledger, key=lambda e: e["t"])]
    assert order.index((2, "start")) < order.index((1, "after")), order
    assert status(quick) == "succeeded"
    job = queue.get(sleeper)
    assert job is not None and job.attempts == 1  # the sleep used no attempt
    assert [e.event for e in queue.events(sleeper)].count("SLEEPING") == 1
    assert_consistent(cluster.db_url)


def test_a_signal_wakes_an_idle_worker(cluster: Cluster, queue: errands.Queue) -> None:
    """poll_interval 30 s, the library's lease and heartbeat: the parked job resumes within
    the wake-up's pickup time after q.signal from this process, not at the next poll."""
    job_id = queue.enqueue("waiter_job", {"seq": 1})
    worker = cluster.worker("--poll", "30", "--lease", "60", "--heartbeat", "15")
    cluster.wait_registered(worker)

    def status() -> str:
        job = queue.get(job_id)
        assert job is not None
        return job.status

    wait_for(lambda: status() == "waiting", 30, "the job to park")
    time.sleep(0.5)  # let the worker go idle on its listener
    queue.signal(job_id, "go", {"ok": 1})
    wait_for(lambda: status() == "succeeded", PICKUP_DEADLINE, "the signalled job to run")
    assert worker.stop() == 0
    job = queue.get(job_id)
    assert job is not None and job.result == {"ok": 1}
    assert_consistent(cluster.db_url)


def chaos(cluster: Cluster, queue: errands.Queue, jobs: int, seconds: float) -> None:
    """Multi-step jobs with sleeps and signals while workers are SIGKILLed at random: none
    lost, no connection= effect twice, none left waiting once its signal was sent."""
    url = cluster.db_url
    create_side_table(url)
    ids = [queue.enqueue("journey_job", {"seq": n}) for n in range(jobs)]
    rng = random.Random(3333)
    unsent = list(ids)
    rng.shuffle(unsent)
    workers = [cluster.worker("--concurrency", "4") for _ in range(2)]
    end = time.monotonic() + seconds
    kills = 0
    while time.monotonic() < end:
        time.sleep(rng.uniform(0.1, 0.6))
        for _ in range(rng.randint(1, 3)):
            if unsent:
                queue.signal(unsent.pop(), "go", {"ok": True})
        victim = rng.randrange(len(workers))
        workers[victim].kill()
        kills += 1
        workers[victim] = cluster.worker("--concurrency", "4")
    while unsent:
        queue.signal(unsent.pop(), "go", {"ok": True})

    def all_done() -> bool:
        states = [s for (s,) in rows(url, "SELECT status FROM jobs")]
        return states.count("succeeded") == jobs

    wait_for(all_done, 180, "every journey_job to succeed")
    for w in workers:
        cluster.wait_registered(w)  # its signal handlers are in place: SIGTERM stops it cleanly
        assert w.stop() == 0
    effects = rows(url, "SELECT job_id, seq, count(*) FROM side_effects GROUP BY job_id, seq")
    assert sorted((j, s) for j, s, _ in effects) == sorted((j, s) for j in ids for s in (0, 1))
    assert {c for _, _, c in effects} == {1}, "a connection= step's effect twice"
    for job_id in ids:
        job = queue.get(job_id)
        assert job is not None and job.result == {"ok": True}
    assert kills >= 5
    assert_consistent(url)


def test_steps_chaos(cluster: Cluster, queue: errands.Queue) -> None:
    chaos(cluster, queue, jobs=40, seconds=8)


@pytest.mark.slow
def test_steps_chaos_long(cluster: Cluster, queue: errands.Queue) -> None:
    chaos(cluster, queue, jobs=300, seconds=60)
