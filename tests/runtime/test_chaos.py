"""SIGKILL chaos: workers are killed at random while they run thousands of tiny jobs.

At-least-once with bounded duplicates: nothing lost, nothing unexpected, re-executions only of
jobs a killed worker held, no job left running under a dead owner beyond the recovery bound.
"""

from __future__ import annotations

import random
import signal
import time
from collections import Counter
from typing import Any

import pytest

import errands

from .conftest import (
    RECOVERY_BOUND,
    Cluster,
    assert_consistent,
    assert_integrity,
    figures,
    running_owners,
    starts,
    status_counts,
    wait_for,
    worker_pids,
)

WORKERS = 3
CONCURRENCY = 4
MAX_PREFETCH = 8


def run_chaos(
    cluster: Cluster,
    queue: errands.Queue,
    capsys: pytest.CaptureFixture[str],
    *,
    jobs: int,
    chaos_seconds: float,
    kill_every: float = 0.2,
    name: str,
) -> None:
    rng = random.Random()
    args = ("--concurrency", str(CONCURRENCY), "--max-prefetch", str(MAX_PREFETCH))
    workers = [cluster.worker(*args) for _ in range(WORKERS)]
    killed_at: dict[int, float] = {}  # pid -> when we killed it
    overdue: list[str] = []

    def sample_dead_owners() -> None:
        now = time.monotonic()
        for job_id, pid in running_owners(cluster.db_url):
            if pid in killed_at and now - killed_at[pid] > RECOVERY_BOUND:
                overdue.append(
                    f"job {job_id} still running {now - killed_at[pid]:.1f}s after "
                    f"its worker {pid} was killed"
                )

    # Enqueue in batches over the whole chaos window so the workers are busy when killed.
    ids: dict[int, int] = {}  # job id -> seq
    batches = max(1, int(chaos_seconds / kill_every))
    per_batch = -(-jobs // batches)
    seq = 0
    kills = working_kills = 0
    t0 = time.monotonic()
    tick = t0
    while seq < jobs or time.monotonic() - t0 < chaos_seconds:
        if seq < jobs:
            n = min(per_batch, jobs - seq)
            items = [
                ("ledger_job", {"seq": s, "ms": rng.uniform(0, 20)}) for s in range(seq, seq + n)
            ]
            for job_id, s in zip(queue.enqueue_many(items), range(seq, seq + n), strict=True):
                ids[job_id] = s
            seq += n
        # One kill per tick, at a random moment of it: right after a batch lands the workers
        # are busy, at the end of the tick they may be idle; both should be hit.
        time.sleep(max(0.0, tick + rng.uniform(0, kill_every) - time.monotonic()))
        # Prefer a worker that has registered (is claiming and running jobs): a process
        # killed while still importing tests nothing.
        working = worker_pids(cluster.db_url)
        candidates = [i for i, p in enumerate(workers) if p.pid in working] or list(range(WORKERS))
        victim = rng.choice(candidates)
        proc = workers[victim]
        if proc.alive():
            proc.signal(signal.SIGKILL)
            killed_at[proc.pid] = time.monotonic()
            proc.popen.wait(10)
            kills += 1
            working_kills += proc.pid in working
        workers[victim] = cluster.worker(*args)
        sample_dead_owners()
        tick += kill_every
        time.sleep(max(0.0, tick - time.monotonic()))

    chaos_end = time.monotonic()
    for i, proc in enumerate(workers):  # every worker alive for the drain
        if not proc.alive():
            workers[i] = cluster.worker(*args)

    def drained() -> bool:
        sample_dead_owners()
        counts = status_counts(cluster.db_url)
        return counts["queued"] + counts["running"] == 0

    wait_for(drained, 60 + jobs / 50, "the queue to drain after the chaos", every=0.2)
    drain_seconds = time.monotonic() - chaos_end
    for proc in workers:
        cluster.wait_registered(proc)
        assert proc.stop() == 0, proc.stderr()
        proc.assert_clean_log()

    assert_integrity(cluster.db_url)
    states = assert_consistent(cluster.db_url)
    ledger = cluster.ledger()
    executions = starts(ledger)
    per_job = Counter(e["job"] for e in executions)
    lost = [j for j in ids if states.get(j) != "succeeded" or per_job[j] == 0]
    unexpected = [e for e in executions if ids.get(e["job"]) != e["seq"]]
    duplicates = sum(n - 1 for n in per_job.values())
    # A job runs again only because the worker that ran it before was killed.
    by_job: dict[int, list[dict[str, Any]]] = {}
    for e in sorted(executions, key=lambda e: e["t"]):
        by_job.setdefault(e["job"], []).append(e)
    unexplained = [e for runs in by_job.values() for e in runs[:-1] if e["pid"] not in killed_at]
    bound = kills * (CONCURRENCY + MAX_PREFETCH)
    figures(
        capsys,
        name,
        jobs=len(ids),
        executions=len(executions),
        kills=kills,
        kills_of_registered_workers=working_kills,
        duplicates=duplicates,
        duplicate_bound=bound,
        chaos_seconds=round(chaos_end - t0, 1),
        drain_seconds=round(drain_seconds, 2),
    )
    assert len(ids) == jobs
    assert lost == [], f"{len(lost)} jobs lost, e.g. {lost[:10]}"
    assert unexpected == [], f"unexpected executions: {unexpected[:10]}"
    assert set(states) == set(ids), "jobs appeared that nobody enqueued"
    assert duplicates <= bound
    assert unexplained == [], f"re-run although its worker lived: {unexplained[:10]}"
    assert overdue == [], overdue[:10]
    assert kills >= chaos_seconds / kill_every / 2


@pytest.mark.heavy
def test_sigkill_chaos(
    cluster: Cluster, queue: errands.Queue, capsys: pytest.CaptureFixture[str]
) -> None:
    run_chaos(cluster, queue, capsys, jobs=2000, chaos_seconds=8, name="chaos")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_sigkill_chaos_long(
    cluster: Cluster, queue: errands.Queue, capsys: pytest.CaptureFixture[str]
) -> None:
    run_chaos(cluster, queue, capsys, jobs=30000, chaos_seconds=120, name="chaos-long")
