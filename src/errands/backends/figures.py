"""The figures ``stats`` reads — ``job_counts``, ``job_stats_minutely``,
``job_errors_minutely`` — kept by errands' own writes, in the same transaction (issue #14).

Until schema version 4 triggers kept them; on SQLite a row trigger's program runs for every
row it could fire on, its WHEN included, and cost the worker 10-16 µs per job even standing
aside. Now each errands write that moves a job into or out of a final state, or closes an
attempt with an outcome, counts what it wrote with grouped named queries (``jobs.sql``), one
statement per figure table whatever the number of jobs:

- into a final state, after the write — :func:`count`: the worker's batch of outcomes
  (``jobs.py``: ``finish``), ``complete_in``, an operator's cancel of queued jobs
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
concurrent writers never wait on each other's counter rows; the Pruner folds the shards.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from .host import Conn


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
