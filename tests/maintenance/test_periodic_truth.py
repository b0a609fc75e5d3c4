"""Schedules agree with what runs (issue #21, item 3): a schedule that never succeeds is overdue
measured from its first tick and stays so tick after tick; a schedule no live worker declares
is retired (not overdue) in stats, check, the API and the CLI, and ``errands periodic remove``
deletes it. Both backends."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import pytest

import errands
from errands.backends.base import WorkerInfo
from errands.cli import main
from errands.core.schedule import overdue_reason
from errands.maintenance.scheduler import PeriodicScheduler
from errands.worker import Worker
from helpers.ops import vacuum_runs
from helpers.support import EPOCH, FixedClock

Make = Callable[..., errands.Queue]


def _overdue(q: errands.Queue, name: str, now: float) -> str | None:
    (row,) = [r for r in q.backend.list_periodic() if r.name == name]
    return overdue_reason(row, now)


@pytest.mark.parametrize(("every", "grace"), [(30.0, 120.0), (600.0, 60.0)])
def test_a_schedule_that_never_succeeds_is_overdue_from_its_first_tick(
    make_queue: Make, every: float, grace: float
) -> None:
    clock = FixedClock(EPOCH)
    q = make_queue(clock=clock)

    @q.periodic(every=every, grace=grace)
    def flaky() -> None: ...

    s = PeriodicScheduler(q.backend, q.schedules, q.tasks, clock=clock)
    first = EPOCH + every  # the first tick
    states = []
    t = first + 1
    while t < first + 10 * max(every, grace):
        s.run_once(t)  # a job every tick; none ever succeeds
        states.append((t, _overdue(q, "flaky", t)))
        t += every / 3
    assert all(reason is None for at, reason in states if at < first + grace)
    late = [reason for at, reason in states if at > first + grace]
    assert late and all(r is not None and "never succeeded" in r for r in late), states


def _declaring_worker(q: errands.Queue, worker_id: str, schedules: list[str] | None) -> None:
    info = WorkerInfo(worker_id, "host", 1, None, 1, types=["x"], schedules=schedules)
    q.backend.register_worker(info, time.time())


def _old_schedule(make_queue: Make) -> errands.Queue:
    """A schedule a previous deploy declared, long overdue (its tick was never enqueued)."""
    old = make_queue(clock=FixedClock(time.time() - 86400))

    @old.periodic(every=60, name="old_report")
    def old_report() -> None: ...

    return make_queue()


def test_a_schedule_no_live_worker_declares_is_retired_not_overdue(
    make_queue: Make, db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    q = _old_schedule(make_queue)
    # No worker alive: "is a scheduler running?" is the right question.
    assert main(["--db", db_url, "check"]) == 1
    assert "old_report" in capsys.readouterr().out
    # A redeployed worker that declares other schedules: old_report is retired.
    _declaring_worker(q, "new-1", ["daily"])
    vacuum_runs(q)  # as a live worker's maintenance does (CI's server has autovacuum off)
    stats = q.stats()
    assert stats["periodic_overdue"] == []
    assert stats["periodic_retired"] == [{"name": "old_report", "type": "old_report"}]
    assert main(["--db", db_url, "check"]) == 0
    capsys.readouterr()
    assert main(["--db", db_url, "periodic", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert (row["name"], row["retired"], row["overdue"]) == ("old_report", True, False)
    assert main(["--db", db_url, "periodic"]) == 0
    assert "retired" in capsys.readouterr().out


def test_a_worker_of_an_older_errands_retires_nothing(make_queue: Make) -> None:
    q = _old_schedule(make_queue)
    _declaring_worker(q, "new-1", ["daily"])
    _declaring_worker(q, "old-1", None)  # does not say which schedules it declares
    assert [o["name"] for o in q.stats()["periodic_overdue"]] == ["old_report"]


def test_a_worker_records_the_schedules_it_declares(make_queue: Make) -> None:
    q = make_queue()

    @q.periodic(every=60, name="sweep")
    def sweep() -> None: ...

    @q.task
    def other() -> None: ...

    w = Worker(q, handle_signals=False, concurrency=1)
    w.start()
    try:
        (live,) = q.workers()
        assert live["schedules"] == ["sweep"]
    finally:
        w.close()


def test_periodic_remove_deletes_a_retired_schedule(
    make_queue: Make, db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    q = _old_schedule(make_queue)
    _declaring_worker(q, "new-1", ["old_report"])
    # Still declared by a live worker: it would come back, so it is refused.
    assert main(["--db", db_url, "periodic", "remove", "old_report"]) == 1
    assert "new-1" in capsys.readouterr().err
    _declaring_worker(q, "new-1", ["daily"])
    assert main(["--db", db_url, "periodic", "remove", "old_report"]) == 0
    assert "removed" in capsys.readouterr().out
    assert q.backend.list_periodic() == []
    assert main(["--db", db_url, "periodic", "remove", "old_report"]) == 1
    assert "no schedule named 'old_report'" in capsys.readouterr().err


def test_the_api_and_dashboard_show_a_retired_schedule(make_queue: Make) -> None:
    from starlette.testclient import TestClient

    from errands.web import create_app

    q = _old_schedule(make_queue)
    _declaring_worker(q, "new-1", ["daily"])
    with TestClient(create_app(q)) as client:
        (row,) = client.get("/api/admin/periodic").json()["periodic"]
        assert (row["name"], row["retired"], row["overdue"]) == ("old_report", True, False)
        page = client.get("/periodic").text
        assert "retired" in page and "errands periodic remove old_report" in page
