"""Builders for the operations tests: jobs made through the real backend verbs (enqueue →
claim → finish) at chosen times (around ``support.EPOCH``), so the same builders work on
every backend; the plain SQL helpers are ``support``'s."""

from __future__ import annotations

import time
from typing import Any

import errands
from errands.backends.base import ClaimRequest, Failed, NewJob, Retried, Succeeded, WorkerInfo
from errands.core import rollup
from helpers.support import is_postgres, sql_rows

HOUR = 3600.0
DAY = 86400.0


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


def vacuum_runs(q: errands.Queue, holder: str = "w-vacuum") -> None:
    """A live worker leads errands' own vacuum service (its lease, for an hour), as one does
    on a real deployment. CI's PostgreSQL runs with autovacuum off, and ``check`` fails on
    that unless errands' vacuum reclaims the dead tuples: tests that expect ``ok`` say so."""
    q.backend.try_lead("vacuum", holder, 3600.0, time.time())


FINAL = ("succeeded", "failed", "cancelled")


def figures_recounted(url: str) -> tuple[dict[Any, int], dict[Any, tuple[int, float, float]]]:
    """``job_counts`` and ``job_stats_minutely`` as a recount from the rows would have them
    (every shard summed): jobs per final state, queue and type; per minute, queue and bucket
    the outcomes by attempts used, the wait of each finished job and the run time of each
    attempt that ended with an outcome. Exact while no job was retried or pruned (both keep
    the figures of what is gone from the rows)."""
    counts: dict[Any, int] = {}
    minutes: dict[Any, tuple[int, float, float]] = {}

    def add(key: Any, value: float) -> None:
        n, total, top = minutes.get(key, (0, 0.0, 0.0))
        minutes[key] = (n + 1, total + value, max(top, value))

    # Durations subtracted by the database: PostgreSQL's are exact in microseconds, which
    # float seconds near 1.8e9 are not (a value on a bucket bound would change bucket).
    minus = "EXTRACT(EPOCH FROM {} - {})" if is_postgres(url) else "{} - {}"
    jobs = sql_rows(
        url,
        "SELECT status, queue, type, attempts, finished_at, "
        f"{minus.format('started_at', 'run_at')} FROM jobs",
    )
    for status, queue, jtype, attempts, finished, waited in jobs:
        if status not in FINAL or finished is None:
            continue
        counts[(status, queue, jtype)] = counts.get((status, queue, jtype), 0) + 1
        minute = rollup.minute_of(finished)
        add((status, minute, queue, attempts), 0.0)
        if waited is not None:
            wait = max(float(waited), 0.0)
            add(("wait", minute, queue, rollup.bucket(wait)), wait)
    attempts_rows = sql_rows(
        url,
        f"SELECT a.status, j.queue, a.finished_at, {minus.format('a.finished_at', 'a.started_at')} "
        "FROM job_attempts a JOIN jobs j ON j.id = a.job_id",
    )
    for status, queue, finished, ran in attempts_rows:
        if status in FINAL and finished is not None:
            run = max(float(ran), 0.0)
            add(("run", rollup.minute_of(finished), queue, rollup.bucket(run)), run)
    return counts, minutes


def figures_kept(url: str) -> tuple[dict[Any, int], dict[Any, tuple[int, float, float]]]:
    """What ``job_counts`` and ``job_stats_minutely`` hold, every shard summed."""
    counts = {
        (s, q, t): int(n)
        for s, q, t, n in sql_rows(
            url,
            "SELECT status, queue, type, SUM(n) FROM job_counts GROUP BY status, queue, type "
            "HAVING SUM(n) <> 0",
        )
    }
    minutes = {
        (m, float(minute), q, int(b)): (int(n), float(total), float(top))
        for m, minute, q, b, n, total, top in sql_rows(
            url,
            "SELECT measure, minute, queue, bucket, SUM(count), SUM(total), MAX(maximum) "
            "FROM job_stats_minutely GROUP BY measure, minute, queue, bucket",
        )
    }
    return counts, minutes


def assert_figures_equal_a_recount(url: str, *, minutes_too: bool = True) -> None:
    """The figures errands' own writes keep equal a recount from the rows
    (sums to within rounding: added in another order, and PostgreSQL's microsecond timestamps
    read here as float seconds lose a little below the microsecond)."""
    kept_counts, kept_minutes = figures_kept(url)
    counts, minutes = figures_recounted(url)
    assert kept_counts == counts
    if not minutes_too:
        return
    assert sorted(kept_minutes) == sorted(minutes)
    for key, (n, total, top) in minutes.items():
        got = kept_minutes[key]
        assert got[0] == n, key
        assert abs(got[1] - total) <= 1e-6 * n + 1e-9 * total, (key, got, total)
        assert abs(got[2] - top) <= 1e-6, (key, got, top)
