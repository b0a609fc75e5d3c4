"""The operator activity log through the Queue (docs/operations.md, "The activity log"): every
operator action leaves exactly one row with its actor, on both backends; reads page and filter;
prune keeps the log for retention["activity"]."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest

import errands
from errands.core.settings import Retention
from helpers.ops import DAY, HOUR
from helpers.support import EPOCH, FixedClock

WHO = "ops:alice"


def world(q: errands.Queue) -> dict[str, Any]:
    """Jobs in the states each action takes, a schedule, a paused queue and a stored limit."""

    @q.task
    def work(n: int) -> None: ...

    @q.periodic(every=HOUR)
    def hourly() -> None: ...

    cancelled = work.enqueue(n=0)
    q.cancel(cancelled, actor="setup")
    later = [q.enqueue("work", {"n": i}, delay=HOUR) for i in (1, 2, 3)]
    queued = work.enqueue(n=4)
    q.pause("paused", actor="setup")
    q.set_limit("k", running=1, actor="setup")
    return {"cancelled": cancelled, "later": later, "queued": queued}


# Every Queue method that changes what operators see, with the action its row names. A new
# method taking ``actor=`` must be added here (or to NOT_LOGGED, saying why): see the test
# below that walks the Queue's methods.
LOGGED: dict[str, tuple[str, Callable[[errands.Queue, dict[str, Any]], Any]]] = {
    "act": ("cancel", lambda q, w: q.act("cancel", [w["queued"]], actor=WHO)),
    "retry": ("retry", lambda q, w: q.retry(w["cancelled"], actor=WHO)),
    "cancel": ("cancel", lambda q, w: q.cancel(w["queued"], actor=WHO)),
    "delete": ("delete", lambda q, w: q.delete(*w["later"], actor=WHO)),
    "run_now": ("run_now", lambda q, w: q.run_now(w["later"][0], actor=WHO)),
    "set_priority": ("priority", lambda q, w: q.set_priority(5, *w["later"], actor=WHO)),
    "pause": ("pause", lambda q, w: q.pause("default", reason="deploy", actor=WHO)),
    "resume": ("resume", lambda q, w: q.resume("paused", actor=WHO)),
    "set_limit": ("set_limit", lambda q, w: q.set_limit("k", running=3, actor=WHO)),
    "clear_limit": ("clear_limit", lambda q, w: q.clear_limit("k", actor=WHO)),
    "disable_periodic": ("periodic_disable", lambda q, w: q.disable_periodic("hourly", actor=WHO)),
    "enable_periodic": ("periodic_enable", lambda q, w: q.enable_periodic("hourly", actor=WHO)),
    "remove_periodic": ("periodic_remove", lambda q, w: q.remove_periodic("hourly", actor=WHO)),
    "run_periodic": ("periodic_run", lambda q, w: q.run_periodic("hourly", actor=WHO)),
    "prune": ("prune", lambda q, w: q.prune(actor=WHO)),
}
# Methods with an ``actor`` that are an application's own work, not an operator's: each job
# they write has its own ENQUEUED or SIGNALLED event naming the actor. (By hand, with
# by_hand=True as the CLI and the admin API pass, enqueue and signal are logged:
# test_activity_atomic.py, tests/web, tests/cli.)
NOT_LOGGED = {
    "enqueue",
    "enqueue_async",
    "enqueue_many",
    "enqueue_many_async",
    "chain",
    "batch",
    "signal",
    "activity",  # the read: ``actor`` is its filter
    "record_activity",  # the writer itself
}


def test_every_queue_method_with_an_actor_is_logged_or_said_not_to_be() -> None:
    with_actor = {
        name
        for name, member in inspect.getmembers(errands.Queue, callable)
        if not name.startswith("_") and "actor" in inspect.signature(member).parameters
    }
    assert with_actor - set(LOGGED) - NOT_LOGGED == set(), "log these, or say why not"
    assert set(LOGGED) | NOT_LOGGED <= with_actor


@pytest.mark.parametrize("method", sorted(LOGGED))
def test_each_operator_action_leaves_exactly_one_row_with_its_actor(
    q: errands.Queue, method: str
) -> None:
    w = world(q)
    before = q.activity(limit=1000)
    action, call = LOGGED[method]
    call(q, w)
    after = q.activity(limit=1000)
    new = after[: len(after) - len(before)]
    assert [(e.actor, e.action) for e in new] == [(WHO, action)]
    assert new[0].id > (before[0].id if before else 0)


def test_the_job_events_of_an_action_name_the_same_actor(q: errands.Queue) -> None:
    w = world(q)
    q.retry(w["cancelled"], actor=WHO)
    q.set_priority(9, w["later"][0], actor=WHO)
    assert q.events(w["cancelled"])[-1].actor == WHO
    assert q.events(w["later"][0])[-1].actor == WHO
    (retried, *_) = q.activity(action="retry")
    assert (retried.target, retried.count) == (f"job {w['cancelled']}", 1)


def test_a_bulk_action_is_one_row_with_its_count_and_filter(q: errands.Queue) -> None:
    w = world(q)
    ids = q.select_jobs("priority", "queued", type="work")
    q.act(
        "priority",
        ids,
        actor=WHO,
        priority=3,
        selected_by={"status": "queued", "type": "work", "queue": None},
    )
    (row,) = q.activity(action="priority")
    assert row.count == len(ids) == 4  # three later, one queued
    assert row.filter == {"status": "queued", "type": "work"}  # the empty filters dropped
    assert row.detail is not None and row.detail["priority"] == 3
    assert sorted(row.detail["changed"]) == sorted([*w["later"], w["queued"]])
    assert row.target is not None and row.target.startswith("jobs ")


def test_an_action_that_changes_nothing_still_says_who_tried(q: errands.Queue) -> None:
    world(q)
    assert q.resume("never-paused", actor=WHO) is False
    (row,) = q.activity(actor=WHO)
    assert (row.action, row.count) == ("resume", 0)


def test_refused_input_leaves_no_row(q: errands.Queue) -> None:
    w = world(q)
    before = len(q.activity(limit=1000))
    with pytest.raises(errands.ConfigurationError):
        q.act("explode", [w["queued"]], actor=WHO)
    with pytest.raises(errands.ConfigurationError):
        q.set_priority(2**40, w["queued"], actor=WHO)
    with pytest.raises(errands.JobNotFoundError):
        q.disable_periodic("no-such-schedule", actor=WHO)
    with pytest.raises(errands.ConfigurationError):
        q.pause("default", actor="")
    q.prune(dry_run=True, actor=WHO)  # counts only: changes nothing
    assert len(q.activity(limit=1000)) == before


def test_reads_are_newest_first_filtered_and_paged(q: errands.Queue) -> None:
    for i in range(7):
        q.pause(f"q{i}", actor="alice" if i % 2 else "bob")
    rows = q.activity(limit=3)
    assert [r.target for r in rows] == ["q6", "q5", "q4"]
    rest = q.activity(limit=100, before=rows[-1].id)
    assert [r.target for r in rest] == ["q3", "q2", "q1", "q0"]
    assert [r.target for r in q.activity(actor="alice")] == ["q5", "q3", "q1"]
    assert q.activity(action="resume") == []
    assert {r.action for r in q.activity(actor="bob", action="pause")} == {"pause"}
    d = rows[0].to_dict()
    assert set(d) == {"id", "at", "actor", "action", "target", "count", "filter", "detail"}
    assert d["at"].endswith("+00:00")


def test_bad_reads_say_what_is_wrong(q: errands.Queue) -> None:
    with pytest.raises(errands.ConfigurationError, match="limit"):
        q.activity(limit=0)
    with pytest.raises(errands.ConfigurationError, match="before"):
        q.activity(before=-1)
    with pytest.raises(errands.PayloadError, match="actor filter"):
        q.activity(actor="a\x00b")


def test_prune_keeps_the_log_for_its_retention(db_url: str) -> None:
    clock = FixedClock(EPOCH)
    with errands.Queue(db_url, clock=clock, retention={"activity": 10 * DAY}) as q:
        q.pause("old", actor="alice")
        clock.advance(9 * DAY)
        q.pause("newer", actor="alice")
        clock.advance(2 * DAY)  # "old" is 11 days old, "newer" 2
        report = q.prune(actor="bob")
        assert report.activity == 1
        assert [(r.action, r.target) for r in q.activity()] == [
            ("prune", None),
            ("pause", "newer"),
        ]
        assert q.activity(action="prune")[0].detail == {
            "deleted": {"succeeded": 0, "failed": 0, "cancelled": 0},
            "activity": 1,
            "interrupted": False,
        }


def test_the_default_activity_retention_is_a_year() -> None:
    assert Retention().activity == 365 * DAY
    with pytest.raises(errands.ConfigurationError, match="activity"):
        Retention.of({"activty": 1})
