"""An operator's periodic switches (issue #25): disable/enable a schedule and run it now —
through the Queue, the scheduler, stats, check and the CLI, on both backends."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest

import errands
from errands.cli import main
from errands.cli.common import cli_actor
from errands.maintenance.scheduler import PeriodicScheduler
from errands.reports import describe
from helpers.ops import HOUR
from helpers.support import EPOCH, FixedClock


def _row(q: errands.Queue, name: str) -> Any:
    (row,) = [r for r in q.backend.list_periodic() if r.name == name]
    return row


def scheduler(q: errands.Queue) -> PeriodicScheduler:
    return PeriodicScheduler(q.backend, q.schedules, q.tasks, clock=q.clock)


def _hourly(q: errands.Queue) -> None:
    @q.periodic(every=HOUR, grace=300)
    def hourly() -> None: ...


def test_a_disabled_schedule_enqueues_no_tick_and_is_never_overdue(
    q: errands.Queue, clock: FixedClock
) -> None:
    _hourly(q)
    clock.now = EPOCH + 10
    assert q.disable_periodic("hourly", actor="dora") is True
    assert q.disable_periodic("hourly", actor="eve") is False  # already: the first who did stays
    row = _row(q, "hourly")
    assert row.disabled_by == "dora" and row.disabled_at == pytest.approx(EPOCH + 10)
    report = scheduler(q).run_once(EPOCH + 3 * HOUR)
    assert report.enqueued == {} and report.disabled == ["hourly"]
    assert q.jobs(type="hourly") == []
    clock.now = EPOCH + 3 * HOUR  # three ticks late, and never succeeded: not overdue, disabled
    shown = describe(_row(q, "hourly"), clock.now)
    assert (shown["disabled"], shown["overdue"], shown["disabled_by"]) == (True, False, "dora")
    stats = q.stats()
    assert stats["periodic_overdue"] == []
    assert [(d["name"], d["by"]) for d in stats["periodic_disabled"]] == [("hourly", "dora")]


def test_enabling_starts_from_the_next_tick_and_owes_none_it_skipped(
    q: errands.Queue, clock: FixedClock
) -> None:
    _hourly(q)
    q.disable_periodic("hourly")
    clock.now = EPOCH + 5 * HOUR + 60
    assert q.enable_periodic("hourly") is True
    assert q.enable_periodic("hourly") is False
    row = _row(q, "hourly")
    assert row.disabled_at is None and row.next_run_at == EPOCH + 6 * HOUR  # no catch-up burst
    assert describe(row, clock.now)["overdue"] is False  # the skipped ticks are not owed
    assert scheduler(q).run_once(EPOCH + 5 * HOUR + 120).enqueued == {}
    fired = scheduler(q).run_once(EPOCH + 6 * HOUR + 1).enqueued
    assert list(fired) == ["hourly"]
    # within the first tick's grace: not overdue; past it with no success: overdue again
    assert describe(_row(q, "hourly"), EPOCH + 6 * HOUR + 200)["overdue"] is False
    late = describe(_row(q, "hourly"), EPOCH + 6 * HOUR + 301)
    assert late["overdue"] is True and "no success since" in late["overdue_reason"]


def test_a_tick_read_before_the_disable_is_not_fired_after_it(
    q: errands.Queue, clock: FixedClock
) -> None:
    """The race: a scheduler read the schedule enabled, an operator disables it, then the
    scheduler fires — the compare-and-set is fenced on disabled_at, so no job."""
    _hourly(q)
    seen = _row(q, "hourly")
    q.disable_periodic("hourly")
    won, job_id = q.backend.fire_periodic(seen, EPOCH + 2 * HOUR, None, EPOCH + HOUR + 1)
    assert (won, job_id) == (False, None)
    assert _row(q, "hourly").next_run_at == EPOCH + HOUR


def test_run_now_enqueues_one_manual_job_and_leaves_the_ticks_alone(
    q: errands.Queue, clock: FixedClock
) -> None:
    @q.periodic(every=HOUR, payload={"kind": "daily"}, queue="reports", max_attempts=4)
    def report(kind: str) -> None: ...

    q.disable_periodic("report")
    job_id = q.run_periodic("report", actor="frank")  # disabled or not
    job = q.get(job_id)
    assert job is not None and (job.type, job.queue, job.payload) == (
        "report",
        "reports",
        {"kind": "daily"},
    )
    assert job.max_attempts == 4  # the task's options, as a tick's job
    assert job.headers == {"periodic": "report", "trigger": "manual"}
    (event,) = q.events(job_id)
    assert (event.event, event.actor) == ("ENQUEUED", "frank")
    row = _row(q, "report")
    assert row.next_run_at == EPOCH + HOUR and row.last_enqueued_at is None


@pytest.mark.parametrize(
    "name", ["nope", "", "x" * 2000, "<script>alert(1)</script>", "hourly\ud800", "hourly\x00"]
)
def test_unknown_or_absurd_names_are_refused(q: errands.Queue, name: str) -> None:
    _hourly(q)
    for act in (q.disable_periodic, q.enable_periodic, q.run_periodic):
        with pytest.raises((errands.JobNotFoundError, errands.ConfigurationError)):
            act(name)
    assert _row(q, "hourly").disabled_at is None and q.jobs() == []


@pytest.mark.parametrize(("name", "actor"), [("hourly\ud800", "ops"), ("hourly", "op\udfffs")])
def test_a_lone_surrogate_is_refused_with_its_reason_before_the_driver(
    q: errands.Queue, name: str, actor: str
) -> None:
    """No backend stores a lone surrogate as text: the switch names it, instead of the
    driver's UnicodeEncodeError escaping from the middle of a transaction."""
    _hourly(q)
    for act in (q.disable_periodic, q.enable_periodic, q.run_periodic):
        with pytest.raises(errands.ConfigurationError, match="lone surrogate"):
            act(name, actor=actor)
    assert _row(q, "hourly").disabled_at is None and q.jobs() == []


def test_the_cli_names_a_lone_surrogate_in_a_schedule_name(
    q: errands.Queue, db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _hourly(q)
    for action in ("disable", "enable", "run", "remove"):
        assert main(["--db", db_url, "periodic", action, "hourly\udced"]) == 1
        assert "lone surrogate" in capsys.readouterr().err
    assert _row(q, "hourly").disabled_at is None and q.jobs() == []


def test_cli_disable_enable_run_and_check(
    make_queue: Callable[..., errands.Queue], db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    q = make_queue(clock=FixedClock(time.time() - 86400))  # declared a day ago: long overdue now

    @q.periodic(every=60, name="minutely")
    def minutely() -> None: ...

    assert main(["--db", db_url, "check"]) == 1
    assert "periodic 'minutely' overdue" in capsys.readouterr().out
    assert main(["--db", db_url, "periodic", "disable", "minutely"]) == 0
    assert "disabled schedule 'minutely'" in capsys.readouterr().out
    assert main(["--db", db_url, "periodic", "--json"]) == 0
    (shown,) = json.loads(capsys.readouterr().out)
    assert (shown["disabled"], shown["disabled_by"], shown["overdue"]) == (True, cli_actor(), False)
    assert main(["--db", db_url, "periodic"]) == 0
    assert "DISABLED since" in capsys.readouterr().out
    main(["--db", db_url, "check"])  # other problems may remain; not this schedule
    assert "minutely" not in capsys.readouterr().out
    assert main(["--db", db_url, "stats"]) == 0
    assert "disabled  periodic minutely: since" in capsys.readouterr().out
    assert main(["--db", db_url, "periodic", "run", "minutely", "--json"]) == 0
    ran = json.loads(capsys.readouterr().out)
    assert ran["result"] == "enqueued" and q.get(ran["id"]) is not None
    assert main(["--db", db_url, "periodic", "enable", "minutely", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"name": "minutely", "result": "enabled"}
    assert main(["--db", db_url, "periodic", "enable", "nope"]) == 1
    assert "no periodic schedule named 'nope'" in capsys.readouterr().err
    assert main(["--db", db_url, "periodic", "disable"]) == 2


def test_a_redeploy_keeps_a_schedule_disabled(db_url: str, clock: FixedClock) -> None:
    with errands.Queue(db_url, clock=clock) as q:
        _hourly(q)
        q.disable_periodic("hourly", actor="ops")
    with errands.Queue(db_url, clock=clock) as q:  # the same code deployed again
        _hourly(q)
        row = _row(q, "hourly")
        assert (row.disabled_by, row.next_run_at) == ("ops", EPOCH + HOUR)
        assert scheduler(q).run_once(EPOCH + HOUR + 1).enqueued == {}


def test_the_overdue_metric_leaves_a_disabled_schedule_out(
    q: errands.Queue, clock: FixedClock
) -> None:
    from errands.metrics import render_metrics

    _hourly(q)
    clock.now = EPOCH + 3 * HOUR  # its first tick was never enqueued: overdue
    assert b'errands_periodic_overdue{name="hourly"} 1.0' in render_metrics(q)
    q.disable_periodic("hourly")
    assert b'errands_periodic_overdue{name="hourly"} 0.0' in render_metrics(q)


def test_migration_0010_applied_again_keeps_the_switches(sqlite_path: str) -> None:
    """SQLite has no ADD COLUMN IF NOT EXISTS: the runner skips a column already there, so the
    script applied again (as the jobs rebuild test does) neither fails nor loses a switch."""
    import sqlite3

    from errands.backends import sql

    with errands.Queue(sqlite_path) as q:
        q.periodic(every=HOUR, name="hourly")(lambda: None)
        q.disable_periodic("hourly", actor="ops")
    conn = sqlite3.connect(sqlite_path)
    with conn:
        conn.execute("DELETE FROM errands_migrations WHERE version >= 10")
    conn.close()
    with errands.Queue(sqlite_path) as q:
        assert _row(q, "hourly").disabled_by == "ops"
        newest = max(version for version, _ in sql.migrations("sqlite"))
        assert q.backend.schema_version() == newest
