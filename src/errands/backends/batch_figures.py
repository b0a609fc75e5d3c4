"""The figures a worker's batch of outcomes counts itself (issue #14).

Triggers keep ``job_counts`` and ``job_stats_minutely`` current on every path (migration
0002), but on the worker's hot path they cost a third to a half of its throughput: SQLite runs
three upserts per finished job, PostgreSQL's statement-level functions join transition tables
on every claim and outcome. So the worker's batch transactions mark themselves and the
triggers stand aside for them (migration 0004), and the outcome transaction counts its whole
batch with one grouped upsert per figure table, the triggers' own formulas (``jobs.sql``:
``count_batch_jobs``, ``count_batch_minutes``, ``count_batch_errors``). Every other path is
still counted by the triggers, so the figures cannot drift whatever writes the rows.

The mark, by dialect:

- SQLite: a row in ``figures_counted_by_batch`` inserted right after the batch's
  ``BEGIN IMMEDIATE`` and deleted before its ``COMMIT`` (``sqlite.py``: ``_write``). A
  failure rolls both back; under SQLite's one writer no other connection ever sees the row,
  and a row anyone can see is committed and therefore stale: the Pruner's pass deletes it
  (``forget_batch_marks``).
- PostgreSQL: the transaction-local setting below, set with the planner settings the batch
  transactions already take (``postgres.py``: ``_BATCH_TRANSACTION``); it ends with the
  transaction whatever happens. Claims are marked too: a claim changes no figure.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from .host import Conn

# PostgreSQL: the setting the trigger functions read (migration_0004.sql).
SETTING = "errands.figures_counted_by_batch"
# SQLite: the mark's row, in and out within the batch transaction.
SQLITE_MARK = "INSERT INTO figures_counted_by_batch (id) VALUES (1)"
SQLITE_UNMARK = "DELETE FROM figures_counted_by_batch"


def count(
    conn: Conn, q: dict[str, str], job_ids: Sequence[int], unsuccessful: Sequence[int]
) -> None:
    """Inside a marked batch transaction, after its outcomes are written: count the jobs
    whose attempt it ended (``job_ids``; the queries keep those now final for the job
    figures, and every attempt closed with an outcome for run time), and the error codes of
    those of them that did not succeed (``unsuccessful``: a success clears the code, so a
    batch of successes — the hot path — spends no statement on errors)."""
    if not job_ids:
        return
    params = {"job_ids": _dumps(job_ids)}
    conn.execute(q["count_batch_jobs"], params)
    conn.execute(q["count_batch_minutes"], params)
    if unsuccessful:
        conn.execute(q["count_batch_errors"], {"job_ids": _dumps(unsuccessful)})


def _dumps(ids: Sequence[int]) -> str:
    return json.dumps(list(ids), separators=(",", ":"))
