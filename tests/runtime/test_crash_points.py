"""Crash at every write point: ERRANDS_FAULT=<write>.<before|after>_commit makes a real process
exit (os._exit, status 86) at that point. Afterwards nothing acknowledged is missing, nothing is
half-applied, the file is intact, and a normal worker drains everything."""

from __future__ import annotations

import time

import pytest

import errands
from errands.backends.base import ClaimRequest

from .conftest import (
    FAULT_EXIT,
    Cluster,
    assert_consistent,
    assert_integrity,
    event_names,
    rows,
    wait_for,
)

GHOST = "elsewhere:1:ghost"  # a worker on another host: only the lease rescuer can recover it


def attempt_rows(url: str) -> list[tuple[int, int, str]]:
    return [(j, n, s) for j, n, s in rows(url, "SELECT job_id, attempt, status FROM job_attempts")]


def crash(cluster: Cluster, fault: str, role: str = "worker", *args: str) -> str:
    """Run a process with the fault armed; it must die there. Returns its stdout."""
    proc = cluster.start(role, *args, env={"ERRANDS_FAULT": fault})
    assert proc.wait(60) == FAULT_EXIT, f"{fault}: exit {proc.popen.returncode}\n{proc.stderr()}"
    return proc.stdout()


def setup(queue: errands.Queue, op: str) -> dict[str, int]:
    """Jobs acknowledged before the crash, and whatever state the write point needs."""
    ids = {f"seq{s}": queue.enqueue("ledger_job", {"seq": s, "ms": 1}) for s in range(3)}
    if op == "heartbeat":
        ids["slow"] = queue.enqueue("slow_job", {"seq": 100, "seconds": 5.0})
    if op == "rescue":
        # A job claimed a minute ago by a worker on another host that never came back.
        now = time.time()
        ids["ghost"] = queue.enqueue("ledger_job", {"seq": 200}, run_at=now - 120)
        request = ClaimRequest(GHOST, ["ledger_job"], None, 1, 2.0)
        assert [j.id for j in queue.backend.claim(request, now - 60)] == [ids["ghost"]]
    return ids


CASES = [
    (op, when)
    for op in ("enqueue", "claim", "heartbeat", "finish", "rescue", "recover_workers")
    for when in ("before_commit", "after_commit")
]


@pytest.mark.parametrize(("op", "when"), CASES, ids=[f"{o}.{w}" for o, w in CASES])
def test_crash_at_write_point(cluster: Cluster, queue: errands.Queue, op: str, when: str) -> None:
    url = cluster.db_url
    ids = setup(queue, op)
    acknowledged = set(ids.values())
    fault = f"{op}.{when}"
    after = when == "after_commit"

    if op == "enqueue":
        out = crash(cluster, fault, "produce", "--count", "5", "--start", "10")
        acked = {int(line.split()[1]) for line in out.splitlines() if line.startswith("OK ")}
        assert acked == set(), "the producer died before its first enqueue returned"
        fresh = [r[0] for r in rows(url, "SELECT id FROM jobs") if r[0] not in acknowledged]
        assert len(fresh) == (1 if after else 0), "the first enqueue must be all or nothing"
        acknowledged |= acked
    elif op == "recover_workers":
        crash(cluster, "claim.after_commit")  # leaves a dead local worker holding jobs
        held = {r[0] for r in rows(url, "SELECT id FROM jobs WHERE status = 'running'")}
        assert held
        crash(cluster, fault)
        running = {r[0] for r in rows(url, "SELECT id FROM jobs WHERE status = 'running'")}
        assert running == (set() if after else held)
    else:
        crash(cluster, fault, "worker", "--concurrency", "4")

    present = {r[0] for r in rows(url, "SELECT id FROM jobs")}
    assert acknowledged <= present, f"acknowledged jobs missing: {acknowledged - present}"
    assert_integrity(url)
    states = assert_consistent(url)
    attempts = attempt_rows(url)

    if op == "claim":
        running = {j for j, s in states.items() if s == "running"}
        assert bool(running) == after
        assert {(j, 1, "running") for j in running} == set(attempts)
    elif op == "heartbeat":
        (beat,) = rows(url, "SELECT heartbeat_at FROM jobs WHERE type = 'slow_job'")
        assert (beat[0] is not None) == after
        assert states[ids["slow"]] == "running"
    elif op == "finish":
        done = [j for j, s in states.items() if s == "succeeded"]
        assert bool(done) == after
        assert all((j, 1, "succeeded") in attempts for j in done)
    elif op == "rescue":
        ghost = ids["ghost"]
        assert states[ghost] == ("queued" if after else "running")
        assert ((ghost, 1, "lost") in attempts) == after
        assert ("RECOVERED" in event_names(queue, ghost)) == after

    # A normal worker drains everything: startup cleanup takes back what the dead local
    # worker held, the rescuer (once the dead worker's leader lease lapses) the ghost's job.
    drain = cluster.worker("--concurrency", "4")
    wait_for(
        lambda: set(assert_consistent(url).values()) == {"succeeded"},
        30,
        "every job to succeed after the crash",
        every=0.1,
    )
    cluster.wait_registered(drain)
    assert drain.stop() == 0, drain.stderr()
    drain.assert_clean_log()
    assert_integrity(url)


def test_burst_worker_runs_the_jobs_its_rescuer_recovered(
    cluster: Cluster, queue: errands.Queue
) -> None:
    """run_worker(burst=True) returns only when nothing it handles is due: a job its own
    rescuer just put back in the queue is due, so the burst runs it before returning."""
    now = time.time()
    ghost = queue.enqueue("ledger_job", {"seq": 1}, run_at=now - 120)
    request = ClaimRequest(GHOST, ["ledger_job"], None, 1, 2.0)
    assert [j.id for j in queue.backend.claim(request, now - 60)] == [ghost]

    drain = cluster.worker("--burst")
    assert drain.wait(30) == 0, drain.stderr()
    job = queue.get(ghost)
    assert job is not None
    assert (job.status, job.attempts) == ("succeeded", 2)
    assert event_names(queue, ghost) == ["ENQUEUED", "CLAIMED", "RECOVERED", "CLAIMED", "SUCCEEDED"]
