"""An operator action and its activity-log row commit together (docs/operations.md, "The
activity log"), on both backends: every operator action — retry, cancel, delete, run now,
priority, pause, resume, set and clear a limit, the schedule actions, prune, and an enqueue or
a signal by hand — writes its row inside the transaction that changes the jobs, queues,
limits, schedules or signals. A process killed right after that commit has left both; a row
the database refuses undoes the action; a bulk action is logged chunk by chunk and a prune
batch by batch, so the row always counts exactly the changes committed so far."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

import errands
from errands.client.bulk import CHUNK
from errands.core import faults
from helpers.ops import DAY, HOUR, run_job
from helpers.support import EPOCH, get_job, is_postgres, sql_rows


def _refuse(url: str, when: str) -> None:
    """Make the database refuse every ``when`` (INSERT or UPDATE) of an activity row."""
    if is_postgres(url):
        import psycopg

        with psycopg.connect(url, autocommit=True) as pg:
            pg.execute(
                "CREATE FUNCTION refuse_activity() RETURNS trigger LANGUAGE plpgsql AS "
                "$$ BEGIN RAISE EXCEPTION 'activity refused'; END $$"
            )
            pg.execute(
                f"CREATE TRIGGER refuse_activity BEFORE {when} ON operator_actions "
                "FOR EACH ROW EXECUTE FUNCTION refuse_activity()"
            )
        return
    lite = sqlite3.connect(url)
    try:
        lite.execute(
            f"CREATE TRIGGER refuse_activity BEFORE {when} ON operator_actions "
            "BEGIN SELECT RAISE(ABORT, 'activity refused'); END"
        )
        lite.commit()
    finally:
        lite.close()


def _rows(url: str) -> list[tuple[Any, ...]]:
    return sql_rows(url, "SELECT actor, action, count FROM operator_actions ORDER BY id")


# A prune's now: the world's finished jobs are past their retention (30 and 90 days), the
# activity rows written at EPOCH are not (365 days).
PRUNE_AT = EPOCH + 100 * DAY


def _world(q: errands.Queue) -> dict[str, int]:
    failed = run_job(
        q, "a", run_at=EPOCH - 300, started=EPOCH - 290, finished=EPOCH - 280, outcome="failed"
    )
    run_job(q, "c", run_at=EPOCH - 300, started=EPOCH - 290, finished=EPOCH - 280)
    later = q.enqueue("b", {}, delay=HOUR)
    q.pause("held", actor="setup")
    q.set_limit("k", running=1, actor="setup")

    @q.periodic(every=HOUR)
    def hourly() -> None: ...

    @q.periodic(every=HOUR)
    def paused_hourly() -> None: ...

    q.disable_periodic("paused_hourly", actor="setup")
    return {"failed": failed, "later": later}


def _schedules(q: errands.Queue) -> list[tuple[str, bool]]:
    return [(r.name, r.disabled_at is None) for r in q.backend.list_periodic()]


def _signals(q: errands.Queue) -> list[tuple[Any, ...]]:
    return sql_rows(q.url, "SELECT job_id, name FROM job_signals ORDER BY id")


def _job_ids(q: errands.Queue) -> list[int]:
    return sorted(j.id for j in q.jobs(limit=1000))


# Each action, and what the database shows of it: the same before and after when the action
# was undone, different when it was done.
ACTIONS: dict[str, tuple[Callable[[errands.Queue, dict[str, int]], Any], Callable[..., Any]]] = {
    "retry": (
        lambda q, w: q.retry(w["failed"], actor="ops"),
        lambda q, w: get_job(q, w["failed"]).status,
    ),
    "cancel": (
        lambda q, w: q.cancel(w["later"], actor="ops"),
        lambda q, w: get_job(q, w["later"]).status,
    ),
    "delete": (
        lambda q, w: q.act("delete", [w["failed"]], actor="ops"),
        lambda q, w: q.get(w["failed"]) is None,
    ),
    "run_now": (
        lambda q, w: q.run_now(w["later"], actor="ops"),
        lambda q, w: get_job(q, w["later"]).run_at,
    ),
    "priority": (
        lambda q, w: q.set_priority(5, w["later"], actor="ops"),
        lambda q, w: get_job(q, w["later"]).priority,
    ),
    "pause": (
        lambda q, w: q.pause("mail", actor="ops"),
        lambda q, w: sorted(p.name for p in q.queues() if p.paused),
    ),
    "resume": (
        lambda q, w: q.resume("held", actor="ops"),
        lambda q, w: sorted(p.name for p in q.queues() if p.paused),
    ),
    "set_limit": (
        lambda q, w: q.set_limit("k", running=3, actor="ops"),
        lambda q, w: [(x.key, x.running) for x in q.limits()],
    ),
    "clear_limit": (
        lambda q, w: q.clear_limit("k", actor="ops"),
        lambda q, w: [(x.key, x.running) for x in q.limits()],
    ),
    "periodic_disable": (
        lambda q, w: q.disable_periodic("hourly", actor="ops"),
        lambda q, w: _schedules(q),
    ),
    "periodic_enable": (
        lambda q, w: q.enable_periodic("paused_hourly", actor="ops"),
        lambda q, w: _schedules(q),
    ),
    "periodic_remove": (
        lambda q, w: q.remove_periodic("hourly", actor="ops"),
        lambda q, w: _schedules(q),
    ),
    "periodic_run": (
        lambda q, w: q.run_periodic("hourly", actor="ops"),
        lambda q, w: len(q.jobs(type="hourly")),
    ),
    "prune": (
        lambda q, w: q.prune(PRUNE_AT, actor="ops"),
        lambda q, w: _job_ids(q),
    ),
    "enqueue": (
        lambda q, w: q.enqueue("hourly", {}, actor="ops", by_hand=True),
        lambda q, w: _job_ids(q),
    ),
    "signal": (
        lambda q, w: q.signal(w["later"], "go", actor="ops", by_hand=True),
        lambda q, w: _signals(q),
    ),
}


@pytest.mark.parametrize("action", sorted(ACTIONS))
def test_a_refused_activity_row_undoes_the_action(q: errands.Queue, action: str) -> None:
    do, shown = ACTIONS[action]
    world = _world(q)
    before, logged = shown(q, world), _rows(q.url)
    _refuse(q.url, "INSERT")
    with pytest.raises(Exception, match="activity refused"):
        do(q, world)
    assert shown(q, world) == before  # rolled back with its row
    assert _rows(q.url) == logged


@pytest.mark.parametrize("action", sorted(ACTIONS))
def test_an_action_is_logged_in_its_own_transaction(q: errands.Queue, action: str) -> None:
    # The same actions without the refusal: done, and logged once, by "ops".
    do, shown = ACTIONS[action]
    world = _world(q)
    before, logged = shown(q, world), _rows(q.url)
    do(q, world)
    assert shown(q, world) != before
    assert len(_rows(q.url)) == len(logged) + 1 and _rows(q.url)[-1][:2] == ("ops", action)


CRASHES = {
    # what the child does, the write it is killed right after, and what it changed
    "retry": ("q.retry({failed}, actor='ops')", "retry"),
    "pause": ("q.pause('mail', actor='ops')", "pause"),
    "set_limit": ("q.set_limit('k', running=3, actor='ops')", "set_limit"),
    # killed after its first batch (the old succeeded job): the rest is never deleted
    "prune": (f"q.prune({PRUNE_AT}, actor='ops')", "prune"),
    "enqueue": ("q.enqueue('hourly', {{}}, actor='ops', by_hand=True)", "enqueue"),
    "signal": ("q.signal({later}, 'go', actor='ops', by_hand=True)", "send_signal"),
}


@pytest.mark.parametrize("action", sorted(CRASHES))
def test_killed_after_the_commit_the_row_is_there(q: errands.Queue, action: str) -> None:
    # Before, the row was a second transaction: a process killed between the two had
    # changed the jobs (or the pause, the limit) with no row saying who did.
    world = _world(q)
    logged = _rows(q.url)
    call, write = CRASHES[action]
    code = f"import sys, errands; q = errands.Queue(sys.argv[1]); {call.format(**world)}"
    crashed = subprocess.run(
        [sys.executable, "-c", code, q.url],
        env={**os.environ, "ERRANDS_FAULT": f"{write}.after_commit"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert crashed.returncode == faults.FAULT_EXIT_CODE, crashed.stderr
    assert _rows(q.url)[len(logged) :] == [("ops", action, 1)]


def test_a_bulk_action_is_logged_chunk_by_chunk(q: errands.Queue) -> None:
    # Two transactions (CHUNK ids, then one): the first inserts the row, the second brings
    # it up to date. If the second fails, the first's changes stay and so does the row,
    # counting exactly them.
    ids = q.enqueue_many([("b", {"n": n}) for n in range(CHUNK + 1)])
    _refuse(q.url, "UPDATE")
    with pytest.raises(Exception, match="activity refused"):
        q.act("cancel", ids, actor="ops")
    statuses = [get_job(q, i).status for i in ids]
    assert statuses.count("cancelled") == CHUNK and statuses[-1] == "queued"
    assert _rows(q.url) == [("ops", "cancel", CHUNK)]


def _prune_rows(q: errands.Queue) -> list[tuple[int, Any]]:
    return [(r.count, r.detail) for r in q.activity(action="prune")]


def _old_jobs(q: errands.Queue, n: int) -> list[int]:
    return [
        run_job(q, f"old{i}", run_at=EPOCH - 300, started=EPOCH - 290, finished=EPOCH - 280)
        for i in range(n)
    ]


def test_a_prune_is_logged_batch_by_batch(q: errands.Queue) -> None:
    # Three batches of one: the first inserts the row, the second's update is refused, so the
    # second batch is undone and the row counts the first's deletion — and says the prune
    # did not finish.
    ids = _old_jobs(q, 3)
    _refuse(q.url, "UPDATE")
    with pytest.raises(Exception, match="activity refused"):
        q.prune(PRUNE_AT, batch_size=1, actor="ops")
    assert [q.get(i) is None for i in ids] == [True, False, False]
    deleted = {"deleted": {"succeeded": 1}, "activity": 0, "interrupted": True}
    assert _prune_rows(q) == [(1, deleted)]


def test_a_stopped_prune_counts_its_batches_and_a_whole_one_says_so(q: errands.Queue) -> None:
    _old_jobs(q, 3)
    asked = iter([False, True])  # checked before each batch: one batch, then stop
    q.prune(PRUNE_AT, batch_size=1, should_stop=lambda: next(asked), actor="ops")
    stopped = {"deleted": {"succeeded": 1}, "activity": 0, "interrupted": True}
    assert _prune_rows(q) == [(1, stopped)]
    q.prune(PRUNE_AT, batch_size=1, actor="ops")  # the rest, and a whole pass
    whole = {"deleted": {"succeeded": 2, "failed": 0, "cancelled": 0}, "activity": 0}
    assert _prune_rows(q)[0] == (2, {**whole, "interrupted": False})


def test_a_prune_stopped_before_its_first_batch_still_leaves_its_row(q: errands.Queue) -> None:
    (old,) = _old_jobs(q, 1)
    q.prune(PRUNE_AT, should_stop=lambda: True, actor="ops")
    assert q.get(old) is not None
    nothing = {"deleted": {"succeeded": 0}, "activity": 0, "interrupted": True}
    assert _prune_rows(q) == [(0, nothing)]


def test_a_prune_never_deletes_its_own_row(q: errands.Queue) -> None:
    # A now= more than the activity retention ahead of the clock: every row written at the
    # clock's time is past the cutoff — the setup rows go, the prune's own (inserted with its
    # first batch, before the activity log's turn) stays.
    (old,) = _old_jobs(q, 1)
    q.pause("held", actor="setup")
    report = q.prune(EPOCH + 400 * DAY, actor="ops")
    assert q.get(old) is None and report.activity == 1
    assert [(r.actor, r.action) for r in q.activity()] == [("ops", "prune")]
    deleted = {"succeeded": 1, "failed": 0, "cancelled": 0}
    assert _prune_rows(q) == [(1, {"deleted": deleted, "activity": 1, "interrupted": False})]


@pytest.mark.parametrize("action", ["enqueue", "signal"])
def test_by_hand_names_the_job_in_its_row_and_the_application_logs_nothing(
    q: errands.Queue, action: str
) -> None:
    later = q.enqueue("b", {}, delay=HOUR, unique_key="k")
    q.signal(later, "go")
    assert q.activity() == []  # the application's own: its work, not an operator's
    if action == "enqueue":  # held key: the job holding it
        assert q.enqueue("b", {}, unique_key="k", actor="ops", by_hand=True) == later
    else:  # by unique_key: the job is found in the transaction
        q.signal(None, "go", unique_key="k", actor="ops", by_hand=True)
    (row,) = q.activity()
    assert (row.actor, row.action, row.target, row.count) == ("ops", action, f"job {later}", 1)
    with pytest.raises(errands.ConfigurationError, match="by_hand"):
        q.signal(later, "go", by_hand=1)  # type: ignore[arg-type]
