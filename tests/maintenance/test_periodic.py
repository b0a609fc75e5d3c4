"""Periodic schedules: registration, exactly one enqueue per tick, catch-up, overdue, DST."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

import errands
from errands.core.schedule import next_tick, overdue_reason
from errands.maintenance.scheduler import PeriodicScheduler
from errands.tasks import DEFAULT_MAX_ATTEMPTS
from helpers.ops import HOUR, run_job
from helpers.support import EPOCH, FixedClock, sql_rows


def _jobs(q: errands.Queue, jtype: str) -> list[Any]:
    return q.jobs(type=jtype, limit=1000)


def _row(q: errands.Queue, name: str) -> Any:
    (row,) = [r for r in q.backend.list_periodic() if r.name == name]
    return row


def scheduler(q: errands.Queue) -> PeriodicScheduler:
    return PeriodicScheduler(q.backend, q.schedules, q.tasks, clock=q.clock)


def test_registers_task_and_schedule(q: errands.Queue) -> None:
    @q.periodic(cron="0 9 * * *", queue="reports", payload={"kind": "daily"})
    def daily_report(kind: str) -> None: ...

    assert "daily_report" in q.tasks and q.tasks["daily_report"].options.queue == "reports"
    row = _row(q, "daily_report")
    assert row.cron == "0 9 * * *" and row.type == "daily_report" and row.catch_up == "skip"
    # EPOCH is 08:00 UTC: the next 09:00 is one hour later
    assert row.next_run_at == EPOCH + HOUR
    assert row.grace_seconds == pytest.approx(0.1 * 86400)


def test_every_ticks_on_multiples_of_the_interval(q: errands.Queue, clock: FixedClock) -> None:
    clock.now = EPOCH + 7

    @q.periodic(every=timedelta(minutes=5), name="sweep")
    def sweeper() -> None: ...

    assert "sweep" in q.tasks
    assert _row(q, "sweep").next_run_at == EPOCH + 300
    assert next_tick(None, 0.5, None, 10.2) == 10.5  # sub-second intervals work too


def test_redeploy_keeps_next_run_and_timing_change_resets(db_url: str, clock: FixedClock) -> None:
    with errands.Queue(db_url, clock=clock) as q:
        q.periodic(every=HOUR, name="job")(lambda: None)
    clock.now = EPOCH + 1800
    with errands.Queue(db_url, clock=clock) as q:
        q.periodic(every=HOUR, name="job", payload={})(lambda: None)
        assert _row(q, "job").next_run_at == EPOCH + HOUR  # unchanged
    with errands.Queue(db_url, clock=clock) as q:
        q.periodic(every=600, name="job")(lambda: None)
        assert _row(q, "job").next_run_at == EPOCH + 2400  # timing changed: recomputed
        assert sql_rows(db_url, "SELECT COUNT(*) FROM periodic") == [(1,)]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"cron": "61 * * * *"}, "bad cron expression"),
        ({"cron": "* * *"}, "bad cron expression"),
        ({"cron": "0 9 * * *", "every": 60}, "exactly one"),
        ({}, "exactly one"),
        ({"every": 60, "timezone": "Mars/Olympus"}, "unknown time zone"),
        ({"every": 60, "catch_up": "all"}, "catch_up"),
        ({"every": 0}, "every must be > 0"),
    ],
)
def test_bad_schedules_are_refused(q: errands.Queue, kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(errands.ConfigurationError, match=match):
        q.periodic(**kwargs)(lambda: None)
    assert q.backend.list_periodic() == []


def test_payload_must_fit_the_handler(q: errands.Queue) -> None:
    with pytest.raises(errands.PayloadError):
        q.periodic(every=60, payload={"nope": 1})(lambda: None)


def test_scheduler_enqueues_each_tick_once(q: errands.Queue, clock: FixedClock) -> None:
    @q.periodic(every=60)
    def tick() -> None: ...

    s = scheduler(q)
    assert s.run_once(EPOCH + 30).enqueued == {}
    first = s.run_once(EPOCH + 61)
    assert list(first.enqueued) == ["tick"]
    assert s.run_once(EPOCH + 62).enqueued == {}  # same tick again: nothing
    assert list(s.run_once(EPOCH + 125).enqueued) == ["tick"]
    jobs = _jobs(q, "tick")
    assert len(jobs) == 2 and all(j.status == "queued" for j in jobs)
    assert _row(q, "tick").next_run_at == EPOCH + 180
    events = q.events(jobs[0].id)
    assert [(e.event, e.actor) for e in events] == [("ENQUEUED", "system")]


def test_many_schedulers_enqueue_exactly_once_per_tick(db_url: str) -> None:
    """Several schedulers (each its own Queue and connection, as in separate workers) run the
    same ticks at the same moments: every tick is enqueued exactly once."""
    n_schedulers, ticks = 6, 12
    clocks = [FixedClock(EPOCH) for _ in range(n_schedulers)]
    queues = [errands.Queue(db_url, clock=c) for c in clocks]
    try:
        for queue in queues:
            queue.periodic(every=10, name="beat")(lambda: None)
        barrier = threading.Barrier(n_schedulers)
        wins: list[list[int]] = [[] for _ in range(n_schedulers)]
        errors: list[BaseException] = []

        def run(i: int) -> None:
            try:
                s = scheduler(queues[i])
                for k in range(1, ticks + 1):
                    barrier.wait(timeout=30)
                    wins[i] += s.run_once(EPOCH + 10 * k + 0.5).enqueued.values()
            except BaseException as exc:  # surfaced below
                errors.append(exc)
                barrier.abort()

        threads = [threading.Thread(target=run, args=(i,)) for i in range(n_schedulers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert not errors, errors
        all_wins = sorted(j for w in wins for j in w)
        assert len(all_wins) == ticks == len(set(all_wins))
        assert len(_jobs(queues[0], "beat")) == ticks
    finally:
        for queue in queues:
            queue.close()


def test_scheduled_jobs_take_their_task_options(q: errands.Queue) -> None:
    q.periodic(every=60, name="tuned", priority=7, max_attempts=3)(lambda: None)
    # The scheduler sees only what it is given: without the task registry, the defaults apply.
    bare = PeriodicScheduler(q.backend, q.schedules, {})
    assert list(bare.run_once(EPOCH + 61).enqueued) == ["tuned"]
    assert list(scheduler(q).run_once(EPOCH + 121).enqueued) == ["tuned"]
    second, first = _jobs(q, "tuned")  # newest first
    assert (first.priority, first.max_attempts) == (0, DEFAULT_MAX_ATTEMPTS)
    assert (second.priority, second.max_attempts) == (7, 3)


def test_catch_up_skip_drops_missed_ticks(q: errands.Queue) -> None:
    @q.periodic(every=HOUR)
    def hourly() -> None: ...

    s = scheduler(q)
    # down from EPOCH until EPOCH + 3.5 h: ticks at +1 h, +2 h and +3 h passed
    report = s.run_once(EPOCH + 3.5 * HOUR)
    assert report.enqueued == {} and report.skipped == ["hourly"]
    assert _jobs(q, "hourly") == []
    assert _row(q, "hourly").next_run_at == EPOCH + 4 * HOUR
    # merely late for the current tick (the next has not come): still enqueued
    assert list(s.run_once(EPOCH + 4 * HOUR + 1800).enqueued) == ["hourly"]


def test_catch_up_once_enqueues_one_job_for_the_gap(q: errands.Queue) -> None:
    @q.periodic(every=HOUR, catch_up="once")
    def hourly() -> None: ...

    s = scheduler(q)
    report = s.run_once(EPOCH + 5.5 * HOUR)
    assert list(report.enqueued) == ["hourly"]
    assert s.run_once(EPOCH + 5.6 * HOUR).enqueued == {}
    assert len(_jobs(q, "hourly")) == 1
    assert _row(q, "hourly").next_run_at == EPOCH + 6 * HOUR


def test_only_this_queues_schedules_run(db_url: str, clock: FixedClock) -> None:
    with errands.Queue(db_url, clock=clock) as q1, errands.Queue(db_url, clock=clock) as q2:
        q1.periodic(every=60, name="mine")(lambda: None)
        assert scheduler(q2).run_once(EPOCH + 61).enqueued == {}
        assert list(scheduler(q1).run_once(EPOCH + 61).enqueued) == ["mine"]


def test_overdue_detection(q: errands.Queue, clock: FixedClock) -> None:
    @q.periodic(every=HOUR, grace=300)
    def hourly() -> None: ...

    s = scheduler(q)
    assert overdue_reason(_row(q, "hourly"), EPOCH + 10) is None  # no tick yet
    # no scheduler ran: the tick at +1 h is more than grace late
    reason = overdue_reason(_row(q, "hourly"), EPOCH + HOUR + 301)
    assert reason is not None and "not enqueued" in reason
    s.run_once(EPOCH + HOUR + 1)
    assert overdue_reason(_row(q, "hourly"), EPOCH + HOUR + 200) is None  # within grace
    reason = overdue_reason(_row(q, "hourly"), EPOCH + HOUR + 301)
    assert reason is not None and "never succeeded" in reason
    # the job runs and succeeds
    (job,) = _jobs(q, "hourly")
    run_job_id = _succeed(q, "hourly", at=EPOCH + HOUR + 400)
    assert run_job_id == job.id
    assert overdue_reason(_row(q, "hourly"), EPOCH + HOUR + 500) is None
    # next tick enqueued but its job never succeeds: overdue once that tick is grace old
    s.run_once(EPOCH + 2 * HOUR + 1)
    assert overdue_reason(_row(q, "hourly"), EPOCH + 2 * HOUR + 200) is None
    reason = overdue_reason(_row(q, "hourly"), EPOCH + 2 * HOUR + 301)
    assert reason is not None and "no success since" in reason
    clock.now = EPOCH + 2 * HOUR + 301
    assert [o["name"] for o in q.stats()["periodic_overdue"]] == ["hourly"]


def _succeed(q: errands.Queue, jtype: str, *, at: float) -> int:
    from errands.backends.base import ClaimRequest, Succeeded

    (j,) = q.backend.claim(ClaimRequest("w", [jtype], None, 1, 60), at)
    assert q.backend.finish([Succeeded(j.id, j.attempt, at, None)], "w", at + 1) == [True]
    return j.id


def test_last_success_outlives_pruning(db_url: str, clock: FixedClock) -> None:
    with errands.Queue(db_url, clock=clock, retention={"succeeded": 600}) as q:

        @q.periodic(every=HOUR, grace=300)
        def hourly() -> None: ...

        s = scheduler(q)
        s.run_once(EPOCH + HOUR + 1)
        _succeed(q, "hourly", at=EPOCH + HOUR + 2)
        s.run_once(EPOCH + HOUR + 5)  # persists last_succeeded_at on the schedule
        assert q.prune(now=EPOCH + HOUR + 1000).total == 1
        assert _row(q, "hourly").last_succeeded_at == EPOCH + HOUR + 3
        assert overdue_reason(_row(q, "hourly"), EPOCH + HOUR + 1200) is None


def test_a_success_of_the_type_counts(q: errands.Queue) -> None:
    @q.periodic(every=HOUR, grace=300)
    def hourly() -> None: ...

    t = EPOCH + HOUR + 10
    scheduler(q).run_once(EPOCH + HOUR)
    _succeed(q, "hourly", at=t)
    run_job(q, "other", run_at=t, started=t, finished=t + 1)
    assert _row(q, "hourly").last_succeeded_at == t + 1


def test_cron_in_a_time_zone_across_dst() -> None:
    # Europe/Paris springs forward on 2027-03-28 at 02:00 → 03:00: a 02:30 daily schedule
    # runs at 03:00 that day (croniter's documented behaviour) and at 02:30 CEST after.
    before = datetime(2027, 3, 27, 12, 0, tzinfo=UTC).timestamp()
    first = next_tick("30 2 * * *", None, "Europe/Paris", before)
    second = next_tick("30 2 * * *", None, "Europe/Paris", first)
    assert datetime.fromtimestamp(first, UTC) == datetime(2027, 3, 28, 1, 0, tzinfo=UTC)
    assert datetime.fromtimestamp(second, UTC) == datetime(2027, 3, 29, 0, 30, tzinfo=UTC)
    # 09:00 in New York is 14:00 UTC in winter, 13:00 UTC in summer
    jan = next_tick("0 9 * * *", None, "America/New_York", EPOCH)
    assert datetime.fromtimestamp(jan, UTC).hour == 14
    jul = next_tick(
        "0 9 * * *", None, "America/New_York", datetime(2027, 7, 1, tzinfo=UTC).timestamp()
    )
    assert datetime.fromtimestamp(jul, UTC).hour == 13


NEW_YORK = ZoneInfo("America/New_York")


def _fired_at(q: errands.Queue, clock: FixedClock, start: datetime, end: datetime) -> list[str]:
    """Drive the scheduler every 5 minutes from ``start`` to ``end`` (UTC) and return the
    New York wall times (with their offset) of the jobs it enqueued."""
    s = scheduler(q)
    fired = []
    now = start.timestamp()
    while now <= end.timestamp():
        clock.now = now
        if s.run_once(now).enqueued:
            fired.append(datetime.fromtimestamp(now, NEW_YORK).isoformat())
        now += 300
    return fired


def test_a_daily_schedule_runs_once_on_the_fall_back_night(
    q: errands.Queue, clock: FixedClock
) -> None:
    # New York falls back on 2027-11-07: 01:00-01:59 is shown twice (EDT, then EST).
    clock.now = datetime(2027, 11, 7, 3, 50, tzinfo=UTC).timestamp()  # 23:50 EDT

    @q.periodic(cron="30 1 * * *", timezone="America/New_York")
    def nightly() -> None: ...

    @q.periodic(cron="0 * * * *", timezone="America/New_York")
    def hourly() -> None: ...

    fired = _fired_at(
        q, clock, datetime(2027, 11, 7, 4, tzinfo=UTC), datetime(2027, 11, 7, 9, tzinfo=UTC)
    )
    assert len(_jobs(q, "nightly")) == 1  # once, at the first 01:30 — not again an hour later
    assert "2027-11-07T01:30:00-04:00" in fired and "2027-11-07T01:30:00-05:00" not in fired
    # Hourly runs at both 01:00s: each is a real hour after the last run.
    assert len(_jobs(q, "hourly")) == 6  # 00:00 EDT, 01:00 EDT, 01:00 EST, 02:00, 03:00, 04:00
    assert "2027-11-07T01:00:00-05:00" in fired
    # The next night is back to one 01:30, now in EST.
    assert _row(q, "nightly").next_run_at == datetime(2027, 11, 8, 6, 30, tzinfo=UTC).timestamp()
    # Overdue reads the same ticks: its success at the first 01:30 is not missing a second.
    _succeed(q, "nightly", at=datetime(2027, 11, 7, 5, 31, tzinfo=UTC).timestamp())
    scheduler(q).run_once(clock.now)  # records the success on the schedule
    assert overdue_reason(_row(q, "nightly"), clock.now) is None


def test_a_daily_schedule_at_a_missing_time_runs_once_at_the_jump(
    q: errands.Queue, clock: FixedClock
) -> None:
    # New York springs forward on 2027-03-14: 02:00-02:59 does not exist.
    clock.now = datetime(2027, 3, 14, 4, 50, tzinfo=UTC).timestamp()  # 23:50 EST

    @q.periodic(cron="30 2 * * *", timezone="America/New_York")
    def nightly() -> None: ...

    @q.periodic(cron="0 * * * *", timezone="America/New_York")
    def hourly() -> None: ...

    fired = _fired_at(
        q, clock, datetime(2027, 3, 14, 5, tzinfo=UTC), datetime(2027, 3, 14, 9, tzinfo=UTC)
    )
    assert len(_jobs(q, "nightly")) == 1 and "2027-03-14T03:00:00-04:00" in fired
    # 00:00 EST, 01:00 EST, then 03:00, 04:00, 05:00 EDT: no 02:00 that night.
    assert len(_jobs(q, "hourly")) == 5


def test_scheduled_job_runs_through_a_worker(db_url: str, clock: FixedClock) -> None:
    ran: list[int] = []
    with errands.Queue(db_url, clock=clock) as q:

        @q.periodic(every=60, payload={"n": 7})
        def tick(n: int) -> None:
            ran.append(n)

        clock.now = EPOCH + 61
        scheduler(q).run_once()
        q.run_worker(burst=True, handle_signals=False)
        assert ran == [7]
        assert _row(q, "tick").last_succeeded_at is not None
