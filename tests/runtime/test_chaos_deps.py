"""SIGKILL chaos with dependencies (docs/pipelines.md): workers are killed at random while
hundreds of up→down pairs and a few batches run. Every dependent starts only after its upstream's
successful attempt finished, is released exactly once (one READY), every batch callback is
released once and succeeds, and nothing is left waiting."""

from __future__ import annotations

import random
import signal
import time
from collections import Counter, defaultdict
from datetime import datetime
from typing import Any

import pytest

import errands

from .conftest import (
    Cluster,
    assert_consistent,
    assert_integrity,
    figures,
    rows,
    starts,
    status_counts,
    wait_for,
    worker_pids,
)

WORKERS = 3
PAIRS = 300
BATCHES = 3
MEMBERS = 40


def _epoch(value: Any) -> float:
    """A finished_at as read back: unix seconds (SQLite) or a datetime (PostgreSQL)."""
    return value.timestamp() if isinstance(value, datetime) else float(value)


@pytest.mark.heavy
def test_sigkill_chaos_with_dependencies(
    cluster: Cluster, queue: errands.Queue, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = random.Random()
    args = ("--concurrency", "4", "--max-prefetch", "8")
    workers = [cluster.worker(*args) for _ in range(WORKERS)]
    killed: set[int] = set()
    upstream_of: dict[int, int] = {}  # dependent -> its upstream (pairs)
    doomed: set[int] = set()  # after a failing upstream, "cancel": never runs
    anyway: set[int] = set()  # after a failing upstream, "run": runs once it failed
    callbacks: dict[int, list[int]] = {}  # batch callback -> members
    seq = 0
    kills = 0
    rounds = 12
    for r in range(rounds):
        # Pairs, written two ways: a chain each, and ups then downs after=[up].
        for _ in range(PAIRS // rounds // 2):
            up, down = queue.chain(
                [
                    ("ledger_job", {"seq": seq, "ms": rng.uniform(0, 15)}),
                    ("ledger_job", {"seq": seq + 1, "ms": rng.uniform(0, 5)}),
                ]
            )
            upstream_of[down] = up
            seq += 2
        n = PAIRS // rounds // 2
        ups = queue.enqueue_many(
            [("ledger_job", {"seq": seq + i, "ms": rng.uniform(0, 15)}) for i in range(n)]
        )
        seq += n
        downs = queue.enqueue_many(
            [("ledger_job", {"seq": seq + i}, {"after": [u]}) for i, u in enumerate(ups)]
        )
        seq += n
        upstream_of.update(zip(downs, ups, strict=True))
        # Pairs whose upstream fails: the dependent is cancelled, or runs ("run").
        for rule, into in (("cancel", doomed), ("run", anyway)):
            up, down = queue.chain(
                [
                    ("ledger_fail", {"seq": seq, "ms": rng.uniform(0, 15)}),
                    ("ledger_job", {"seq": seq + 1}, {"on_upstream_failure": rule}),
                ]
            )
            upstream_of[down] = up
            into.add(down)
            seq += 2
        if r % (rounds // BATCHES) == 0 and len(callbacks) < BATCHES:
            with queue.batch(on_complete=("ledger_job", {"seq": seq})) as batch:
                for i in range(MEMBERS):
                    batch.enqueue("ledger_job", {"seq": seq + 1 + i, "ms": rng.uniform(0, 10)})
            seq += MEMBERS + 1
            assert batch.id is not None
            callbacks[batch.id] = batch.ids
        time.sleep(rng.uniform(0.1, 0.4))
        working = worker_pids(cluster.db_url)
        candidates = [i for i, p in enumerate(workers) if p.pid in working] or [0]
        victim = rng.choice(candidates)
        proc = workers[victim]
        if proc.alive():
            proc.signal(signal.SIGKILL)
            killed.add(proc.pid)
            proc.popen.wait(10)
            kills += 1
        workers[victim] = cluster.worker(*args)

    def drained() -> bool:
        counts = status_counts(cluster.db_url)
        return counts["queued"] + counts["running"] + counts["waiting"] == 0

    wait_for(drained, 120, "the pipelines to drain after the chaos", every=0.2)
    for proc in workers:
        cluster.wait_registered(proc)
        assert proc.stop() == 0, proc.stderr()
        proc.assert_clean_log()

    assert_integrity(cluster.db_url)
    states = assert_consistent(cluster.db_url)
    failing = {upstream_of[d] for d in doomed | anyway}
    expected = {
        i: "failed" if i in failing else "cancelled" if i in doomed else "succeeded" for i in states
    }
    assert states == expected
    codes = dict(rows(cluster.db_url, "SELECT id, error_code FROM jobs WHERE status = 'cancelled'"))
    assert {int(i) for i in codes} == doomed and set(codes.values()) == {"UPSTREAM:FAILED"}
    finished = {
        int(i): _epoch(f) for i, f in rows(cluster.db_url, "SELECT id, finished_at FROM jobs")
    }
    ready: Counter[int] = Counter(
        int(j)
        for (j,) in rows(cluster.db_url, "SELECT job_id FROM job_events WHERE event = 'READY'")
    )
    runs: dict[int, list[float]] = defaultdict(list)
    for e in starts(cluster.ledger()):
        runs[int(e["job"])].append(float(e["t"]))
    # Released once; started only after the upstream's successful outcome was recorded.
    early = [
        (down, up)
        for down, up in upstream_of.items()
        if down not in doomed and (not runs[down] or min(runs[down]) < finished[up])
    ]
    assert early == [], f"dependents started before their upstream was final: {early[:10]}"
    assert [d for d in doomed if runs[d]] == [], "a dependent of a failed upstream ran"
    assert [d for d in upstream_of if ready[d] != (d not in doomed)] == []
    for callback, members in callbacks.items():
        assert ready[callback] == 1
        assert runs[callback] and min(runs[callback]) >= max(finished[m] for m in members)
        # A callback runs again only if the worker running it was killed (at-least-once).
        pids = [e["pid"] for e in starts(cluster.ledger()) if e["job"] == callback]
        assert all(p in killed for p in pids[:-1])
    assert rows(cluster.db_url, "SELECT COUNT(*) FROM jobs WHERE status = 'waiting'")[0][0] == 0
    figures(
        capsys,
        "chaos-deps",
        jobs=len(states),
        dependents=len(upstream_of),
        batches=len(callbacks),
        kills=kills,
    )
    assert kills >= rounds // 2
