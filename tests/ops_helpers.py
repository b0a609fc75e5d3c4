"""Builders for the operations tests: jobs made through the real backend verbs (enqueue →
claim → finish) at chosen times, so the same builders work on every backend; and plain SQL
against either backend's tables, rows normalized to what SQLite returns."""

from __future__ import annotations

from typing import Any

import errands
from errands import rollup
from errands.backends.base import ClaimRequest, Failed, NewJob, Retried, Succeeded, WorkerInfo
from support import FixedClock
from support import is_postgres as is_postgres  # re-exported for the operations tests
from support import sql_rows as sql_rows
from support import sqlite_only as sqlite_only

T0 = 1_800_000_000.0  # a fixed "now" (2027-01-15T08:00:00Z): on an hour boundary
HOUR = 3600.0
DAY = 86400.0


# The operations tests' name for support.FixedClock (T0 == its EPOCH); the SQL helpers are
# support's, re-exported so these modules import their builders from one place.
Clock = FixedClock


def binned(exact: float, maximum: float) -> float:
    """What a histogram percentile reports for an exact value: the upper bound of the bucket
    holding it (rollup.BOUNDS), never above the largest value seen."""
    i = rollup.bucket(exact)
    return min(rollup.BOUNDS[i] if i < len(rollup.BOUNDS) else maximum, maximum)


def enqueue(
    q: errands.Queue,
    jtype: str,
    *,
    at: float,
    run_at: float | None = None,
    queue: str = "default",
    max_attempts: int = 5,
) -> int:
    job = NewJob(jtype, "{}", queue, 0, at if run_at is None else run_at, max_attempts)
    (job_id,) = q.backend.enqueue([job], at, actor="api")
    return job_id


def claim(q: errands.Queue, jtype: str, *, at: float, worker: str = "w1", lease: float = 60) -> Any:
    (job,) = q.backend.claim(ClaimRequest(worker, [jtype], None, 1, lease), at)
    return job


def run_job(
    q: errands.Queue,
    jtype: str,
    *,
    run_at: float,
    started: float,
    finished: float | None,
    outcome: str = "succeeded",
    error_code: str = "APP:BROKEN",
    queue: str = "default",
    failures_first: int = 0,
    worker: str = "w1",
) -> int:
    """A job of a type with no other queued job: enqueued due at ``run_at``, failing
    ``failures_first`` attempts (each retried at once), then started at ``started`` and ended
    ``outcome`` (succeeded | failed | running) at ``finished``. Returns its id."""
    job_id = enqueue(q, jtype, at=run_at - 1, run_at=run_at, queue=queue)
    t = run_at
    for _ in range(failures_first):
        j = claim(q, jtype, at=t, worker=worker)
        fail = Retried(j.id, j.attempt, t, "RETRY:ME", "again", "Traceback: x", t, 0.0)
        assert q.backend.finish([fail], worker, t) == [True]
    j = claim(q, jtype, at=started, worker=worker)
    assert j.id == job_id
    if outcome == "running":
        return job_id
    assert finished is not None
    if outcome == "succeeded":
        out: Any = Succeeded(j.id, j.attempt, started, None)
    else:
        out = Failed(j.id, j.attempt, started, error_code, "it broke", "Traceback: y")
    assert q.backend.finish([out], worker, finished) == [True]
    return job_id


def register_worker(
    q: errands.Queue,
    wid: str,
    *,
    at: float,
    types: list[str] | None,
    queues: list[str] | None = None,
) -> None:
    q.backend.register_worker(WorkerInfo(wid, "host", 1234, queues, 4, types=types), at)
