"""The figures ``stats`` reads — ``job_counts``, ``job_stats_minutely``,
``job_errors_minutely`` — kept by errands' own writes, in the same transaction (issue #14).

Until schema version 4 triggers kept them; on SQLite a row trigger's program runs for every
row it could fire on, its WHEN included, and cost the worker 10-16 µs per job even standing
aside. Now each errands write that moves a job into or out of a final state, or closes an
attempt with an outcome, counts what it wrote with grouped named queries (``jobs.sql``), one
statement per figure table whatever the number of jobs:

- into a final state, after the write — :func:`count_held` for the worker's batch of
  outcomes (``jobs.py``: ``finish`` given the claimed jobs, as ``recorder.py`` does): every
  input is already in Python — each outcome and its attempt's start, the batch's finish time,
  the queue, type and run_at of the job it claimed — so the figures are grouped there and
  each table gets one upsert of a small JSON array of grouped rows (``count_grouped_*``),
  instead of re-reading every job and attempt row and bucketing each value in SQL (on
  SQLite ~5 µs per job, against ~0.5 in SQL and ~0.9 in Python now); the same figures, which
  tests/backends/test_figures_paths.py compares with a recount on both backends. :func:`count` reads
  them back from the rows, the reference: a ``finish`` without the claimed jobs,
  ``complete_in``, an operator's cancel of queued jobs
  (``jobs_operator.py``; a running job is only asked to stop: its worker's outcome counts
  it), the rescue of a lost attempt that was the last (``leader.py``; a lost attempt has
  no run time);
- out of a final state, before the write — :func:`uncount`: a manual retry
  (``jobs_operator.py``) and the Pruner's delete (``retention.py``). The minute figures
  are history and keep the outcome; the counts and error minutes equal the rows;
- copied rows — :func:`recount`: ``errands graduate`` fills its target with COPY and
  recounts at the end, and so does ``Queue.recount_figures`` for an operator who changed
  ``jobs`` rows by hand (errands cannot see such a change: docs/operations.md).

PostgreSQL writes into its backend's shard (``pg_backend_pid()``), as the triggers did, so
concurrent writers never wait on each other's counter rows; the Pruner folds the shards. The
worker's ``count_grouped_jobs`` moves to a new shard of its backend every minute: each upsert
leaves a version of its row that a held snapshot keeps, and the next walks them all.
"""

from __future__ import annotations

import json
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

from ..core.rollup import BOUNDS
from ..core.states import TERMINAL, State
from .base import (
    Cancelled,
    ClaimedJob,
    Failed,
    Outcome,
    Released,
    Retried,
    Snoozed,
    Succeeded,
    Suspended,
)
from .host import (
    EXEC,
    F_CANCEL_RUNNING,
    F_FAIL,
    F_RETRY_LATER,
    F_SUCCEED,
    Conn,
    Step,
    Steps,
    dumps,
)


def count(
    conn: Conn,
    q: dict[str, str],
    job_ids: Sequence[int],
    unsuccessful: Sequence[int],
    *,
    with_runs: bool = True,
) -> None:
    """After a write that may have moved ``job_ids`` into a final state: count those now
    final (jobs per state, outcomes and wait per minute), and the error codes of those of
    them that did not succeed (``unsuccessful``: a success clears the code, so a batch of
    successes — the hot path — spends no statement on errors). ``with_runs``: the write also
    closed the attempt each job's ``attempts`` names (a worker's outcome), whose run time is
    counted if it ended with an outcome; not so for a cancel of a queued job, whose last
    attempt, if any, ended and was counted long before."""
    if not job_ids:
        return
    params = {"job_ids": _dumps(job_ids)}
    conn.execute(q["count_batch_jobs"], params)
    conn.execute(q["count_batch_minutes"], {**params, "with_runs": with_runs})
    if unsuccessful:
        conn.execute(q["count_batch_errors"], {"job_ids": _dumps(unsuccessful)})


def count_steps(
    q: dict[str, str], job_ids: Sequence[int], unsuccessful: Sequence[int]
) -> Steps[None]:
    """``count`` as steps, for a write that also runs on an asyncio connection (an enqueue
    after an upstream that already failed cancels its dependents: deps.py). Jobs that never
    ran (``with_runs`` off)."""
    if not job_ids:
        return
    params = {"job_ids": _dumps(job_ids)}
    yield Step(q["count_batch_jobs"], params, EXEC)
    yield Step(q["count_batch_minutes"], {**params, "with_runs": False}, EXEC)
    if unsuccessful:
        yield Step(q["count_batch_errors"], {"job_ids": _dumps(unsuccessful)}, EXEC)


def _final(fence_target: str) -> str:
    """The state an outcome moves its job to, if final ("" if not: a retried job is queued)."""
    return fence_target if State(fence_target) in TERMINAL else ""


SUCCEEDED = _final(F_SUCCEED.params["to_state"])
# The other outcomes that end an attempt, by kind: the state their fence writes, if final.
ENDS: dict[type, str] = {
    Failed: _final(F_FAIL.params["to_state"]),
    Cancelled: _final(F_CANCEL_RUNNING.params["to_state"]),
    Retried: _final(F_RETRY_LATER.params["to_state"]),
}


def count_held(
    conn: Conn,
    q: dict[str, str],
    outcomes: Sequence[Outcome],
    applied: Sequence[bool],
    held: Sequence[ClaimedJob],
    now: float,
    elapsed: Callable[[float, float], float],
) -> bool:
    """What :func:`count` reads back from the rows for a worker's batch, built from what the
    worker already holds — each outcome (``applied``: the fence let it through), the claimed
    job it is for (``held``, same order: queue, type, run_at) and the batch's ``now`` — and
    written as grouped rows, one upsert per figure table whatever the number of jobs.

    The same figures as ``count_batch_*`` (tests/backends/test_figures_paths.py compares both with a
    recount): an applied outcome that is not a release closed its attempt at ``now`` with an
    outcome, so its run (``now - started_at``, at least 0) counts; one that made its job final
    (not a retry) counts its state, its attempts used, its wait (``started_at - run_at``, at
    least 0) and, if not a success, its error code, all in ``now``'s minute. ``elapsed(a, b)``
    is ``b - a`` as the database computes it from the stored times (a backend hook:
    PostgreSQL stores microseconds). The bucket of a value is the number of bounds below it,
    as job_stats_bounds counts them (``rollup.BOUNDS``: tests/client/test_stats.py proves them
    equal). Each job is assumed once in ``outcomes`` (the caller checks). False, having
    written nothing, if a claimed job is not its outcome's: the caller then counts from the
    rows."""
    counts: dict[tuple[str, str, str], int] = {}
    outcome_counts: dict[tuple[str, str, int], int] = {}
    # Waits and runs by group, as lists: count, total and maximum are then taken in C.
    values: defaultdict[tuple[str, str, int], list[float]] = defaultdict(list)
    errors: dict[tuple[str, str], int] = {}
    ends, bounds = ENDS, BOUNDS
    for o, ok, job in zip(outcomes, applied, held, strict=True):
        # Refused, handed back unstarted, or snoozed (count_batch_minutes counts no run of a
        # snoozed attempt either: the job is queued again, as after a release).
        if not ok or isinstance(o, Released | Snoozed | Suspended):
            continue
        if job.id != o.job_id:  # not the job's own claim: nothing to group from
            return False
        if isinstance(o, Succeeded):  # the hot path: a success clears the error code
            status, error = SUCCEEDED, None
        else:
            status, error = _status(o, ends), o.error_code
        queue = job.queue
        run = elapsed(o.started_at, now)
        if run < 0.0:
            run = 0.0
        values["run", queue, bisect_left(bounds, run)].append(run)
        if not status:  # a retry: the job is queued again
            continue
        key = (status, queue, job.type)
        counts[key] = counts.get(key, 0) + 1
        used = (status, queue, o.attempt)
        outcome_counts[used] = outcome_counts.get(used, 0) + 1
        wait = elapsed(job.run_at, o.started_at)
        if wait < 0.0:
            wait = 0.0
        values["wait", queue, bisect_left(bounds, wait)].append(wait)
        if error is not None:
            code = (error, job.type)
            errors[code] = errors.get(code, 0) + 1
    minutes = [[m, qu, b, n, 0.0, 0.0] for (m, qu, b), n in outcome_counts.items()]
    minutes += [[m, qu, b, len(vs), sum(vs), max(vs)] for (m, qu, b), vs in values.items()]
    _write_grouped(conn, q, counts, minutes, errors, now)
    return True


def _status(o: Outcome, ends: dict[type, str]) -> str:
    status = ends.get(type(o))
    if status is not None:
        return status
    for kind, final in ends.items():  # a subclass of an outcome: rare, and not hot
        if isinstance(o, kind):
            return final
    known = ", ".join(["Succeeded", "Released", *(kind.__name__ for kind in ends)])
    raise TypeError(f"not an outcome errands knows: {type(o).__name__}; pass one of {known}")


def _write_grouped(
    conn: Conn,
    q: dict[str, str],
    counts: dict[tuple[str, str, str], int],
    minutes: list[list[Any]],
    errors: dict[tuple[str, str], int],
    now: float,
) -> None:
    """One upsert per figure table, its input a JSON array of the grouped rows (a handful per
    batch); the minute is ``now``'s, cut by the dialect's own SQL as the row-reading
    queries cut a stored ``finished_at``."""
    if counts:
        rows = [[s, qu, t, n] for (s, qu, t), n in counts.items()]
        conn.execute(q["count_grouped_jobs"], {"rows": dumps(rows), "now": now})
    if minutes:
        conn.execute(q["count_grouped_minutes"], {"rows": dumps(minutes), "now": now})
    if errors:
        rows3 = [[code, t, n] for (code, t), n in errors.items()]
        conn.execute(q["count_grouped_errors"], {"rows": dumps(rows3), "now": now})


def uncount(conn: Conn, q: dict[str, str], job_ids: Sequence[int]) -> None:
    """Before a write takes ``job_ids`` out of their final state or deletes them: those still
    final count one fewer in ``job_counts`` and ``job_errors_minutely``."""
    if not job_ids:
        return
    params = {"job_ids": _dumps(job_ids)}
    conn.execute(q["uncount_jobs"], params)
    conn.execute(q["uncount_job_errors"], params)


# The recount, in order (figures.sql): each table emptied (the minutes from ``since`` only),
# then refilled from the rows.
RECOUNT = (
    "forget_job_counts",
    "recount_job_counts",
    "forget_minutes_since",
    "recount_minutes_since",
    "forget_error_minutes_all",
    "recount_error_minutes_since",
)


def recount(conn: Conn, q: dict[str, str], since: float) -> None:
    """Rebuild the figures from the rows in one transaction: ``job_counts`` and
    ``job_errors_minutely`` whole, ``job_stats_minutely`` for the minutes from ``since``
    (a minute's start; older minutes are left as they are)."""
    for name in RECOUNT:
        conn.execute(q[name], {"since": since} if name.endswith("_since") else {})


def _dumps(ids: Sequence[int]) -> str:
    # Each job once: PostgreSQL's queries look each id up (LATERAL), not match a set.
    return json.dumps(list(dict.fromkeys(ids)), separators=(",", ":"))
