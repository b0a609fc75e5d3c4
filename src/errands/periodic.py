"""Periodic jobs: ``@q.periodic(cron=… | every=…)`` and the scheduler service.

Timing. A cron schedule's ticks come from ``croniter`` in the schedule's time zone. DST, as
cron users expect: a wall time that does not exist (spring forward: 02:30 in New York) runs
once, at the next valid time (03:00); on a fall-back night a schedule with fixed hours (daily
``30 1 * * *``) runs once, at the first pass of its wall time, while one whose hour field is
``*`` or ``*/n`` (hourly) runs at every tick of both passes. An ``every=`` schedule ticks at
multiples of its interval since the unix epoch (every=300 → :00, :05, …), so every process
computes the same ticks.

Exactly once per tick. ``periodic.next_run_at`` holds the next tick. A scheduler that finds it
due moves it, with a compare-and-set from the value it read, to the following tick and inserts
the job in the same transaction: however many schedulers run, one wins each tick, forever (the
row outlives every job, unlike a ``unique_key``).

Catch-up after downtime (no scheduler ran while one or more ticks passed):
- ``"skip"`` (default): ticks that were overtaken by a later tick are dropped; the schedule
  resumes at the next future tick and nothing is enqueued for the gap. A scheduler that is
  merely late for the current tick (the next tick has not come yet) still enqueues it.
- ``"once"``: one job is enqueued now for the whole gap, then the schedule resumes.
Never one job per missed tick.

Overdue ("did the work happen at all?"): a schedule is overdue when the newest tick that is at
least ``grace`` old has had no success since (success: the newest succeeded job of the
schedule's type, persisted on the schedule so it outlives pruning), or when its next tick is
more than ``grace`` in the past (no scheduler is running). Default grace: 10% of the interval,
at least 60 s. That is the spec's "last success older than interval + grace", made exact for
irregular cron schedules (weekdays only, say).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter

from . import payload as payload_json
from .backends.base import NewJob, PeriodicRow, PeriodicVerbs
from .errors import ConfigurationError
from .records import to_datetime
from .settings import seconds
from .tasks import DEFAULT_MAX_ATTEMPTS

if TYPE_CHECKING:
    from .queue import Queue
    from .tasks import Task

CATCH_UP = ("skip", "once")
MIN_GRACE = 60.0


def _zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigurationError(
            f"unknown time zone {name!r}; use an IANA name such as 'UTC' or 'Europe/Paris'"
        ) from None


def check_cron(expr: str) -> None:
    if not isinstance(expr, str) or len(expr.split()) != 5 or not croniter.is_valid(expr):
        raise ConfigurationError(
            f"bad cron expression {expr!r}; use five fields 'minute hour day month weekday', "
            "e.g. '0 9 * * *' (09:00 every day) or '*/5 * * * *'"
        )


def _fixed_hours(cron: str) -> bool:
    """Whether the hour field names hours (``30 1 * * *``, ``0 9,17 * * 1-5``) rather than
    stepping through all of them (``*``, ``*/2``)."""
    return not cron.split()[1].startswith("*")


def _second_pass(tick: datetime, zone: ZoneInfo) -> bool:
    """Whether ``tick`` is the second time its wall time is shown on a fall-back night
    (01:30 EST after 01:30 EDT in New York)."""
    wall = tick.replace(tzinfo=None)
    first = wall.replace(tzinfo=zone, fold=0)
    return (
        first.timestamp() < tick.timestamp()
        and datetime.fromtimestamp(first.timestamp(), zone).replace(tzinfo=None) == wall
    )


def _cron_ticks(cron: str, zone: ZoneInfo, start: datetime, forward: bool) -> float:
    """croniter's next (or previous) tick, leaving out the second pass of a fall-back night
    for schedules with fixed hours: a daily ``30 1 * * *`` runs once that night, as cron
    users expect (Vixie cron does the same), while ``0 * * * *`` runs at both 01:00s, each a
    real hour apart. croniter itself returns both 01:30s."""
    it = croniter(cron, start)
    skip_repeats = _fixed_hours(cron)
    while True:
        tick = it.get_next(datetime) if forward else it.get_prev(datetime)
        if not (skip_repeats and _second_pass(tick, zone)):
            return float(tick.timestamp())


def next_tick(cron: str | None, interval: float | None, tz: str | None, after: float) -> float:
    """The first tick strictly after ``after`` (unix seconds)."""
    if cron is not None:
        zone = _zone(tz or "UTC")
        return _cron_ticks(cron, zone, datetime.fromtimestamp(after, zone), forward=True)
    assert interval is not None and interval > 0
    return (math.floor(after / interval) + 1) * interval


def prev_tick(cron: str | None, interval: float | None, tz: str | None, at: float) -> float:
    """The last tick at or before ``at``."""
    if cron is not None:
        # croniter's get_prev is strictly before its start: start just after ``at``.
        zone = _zone(tz or "UTC")
        return _cron_ticks(cron, zone, datetime.fromtimestamp(at + 1e-3, zone), forward=False)
    assert interval is not None and interval > 0
    return math.floor(at / interval) * interval


def nominal_interval(cron: str | None, interval: float | None, tz: str | None, at: float) -> float:
    if cron is None:
        assert interval is not None
        return interval
    a = next_tick(cron, None, tz, at)
    return next_tick(cron, None, tz, a) - a


def overdue_reason(row: PeriodicRow, now: float) -> str | None:
    """Why this schedule is overdue at ``now``, or None (see the module docstring)."""
    grace = row.grace_seconds
    if grace is None:
        grace = max(
            MIN_GRACE, 0.1 * nominal_interval(row.cron, row.interval_seconds, row.timezone, now)
        )
    if row.next_run_at is not None and row.next_run_at < now - grace:
        return f"tick at {_iso(row.next_run_at)} was not enqueued: is a scheduler running?"
    if row.last_enqueued_at is None:
        return None  # no tick has come yet
    expected = prev_tick(row.cron, row.interval_seconds, row.timezone, now - grace)
    if row.last_succeeded_at is None:
        if row.last_enqueued_at <= now - grace:
            return f"enqueued at {_iso(row.last_enqueued_at)}, never succeeded"
        return None
    if row.last_succeeded_at < expected:
        return f"no success since the tick at {_iso(expected)} (last {_iso(row.last_succeeded_at)})"
    return None


def _iso(epoch: float) -> str:
    dt = to_datetime(epoch)
    assert dt is not None
    return dt.isoformat()


@dataclass(frozen=True, slots=True)
class Schedule:
    """A schedule as the application declared it."""

    name: str
    cron: str | None
    interval: float | None
    timezone: str
    queue: str
    payload: str  # JSON text
    catch_up: str
    grace: float

    def row(self, next_run_at: float) -> PeriodicRow:
        return PeriodicRow(
            name=self.name,
            cron=self.cron,
            interval_seconds=self.interval,
            timezone=self.timezone,
            type=self.name,
            payload=self.payload,
            queue=self.queue,
            last_enqueued_at=None,
            next_run_at=next_run_at,
            last_succeeded_at=None,
            catch_up=self.catch_up,
            grace_seconds=self.grace,
            stored_succeeded_at=None,
            next_run_raw=next_run_at,
        )


def register(
    q: Queue,
    fn: Callable[..., Any],
    *,
    cron: str | None,
    every: float | timedelta | None,
    name: str | None,
    queue: str,
    payload: Any,
    timezone: str,
    catch_up: str,
    grace: float | timedelta | None,
    task_options: dict[str, Any],
) -> Task[Any, Any]:
    """``@q.periodic``: register ``fn`` as a task and upsert its schedule row."""
    if (cron is None) == (every is None):
        raise ConfigurationError("@q.periodic needs exactly one of cron='…' or every=seconds")
    if cron is not None:
        check_cron(cron)
    interval = None if every is None else seconds(every, "every")
    _zone(timezone)
    if catch_up not in CATCH_UP:
        raise ConfigurationError(f"catch_up must be 'skip' or 'once', got {catch_up!r}")
    task = q.task(name=name, queue=queue, **task_options)(fn)
    body = {} if payload is None else payload
    task.check_payload(body)
    text = payload_json.encode(body, max_bytes=q.settings.max_payload_bytes)
    now = q.clock()
    nominal = nominal_interval(cron, interval, timezone, now)
    schedule = Schedule(
        name=task.name,
        cron=cron,
        interval=interval,
        timezone=timezone,
        queue=queue,
        payload=text,
        catch_up=catch_up,
        grace=max(MIN_GRACE, 0.1 * nominal) if grace is None else seconds(grace, "grace"),
    )
    q.schedules[task.name] = schedule
    q.backend.upsert_periodic(schedule.row(next_tick(cron, interval, timezone, now)))
    return task


@dataclass(slots=True)
class SchedulerReport:
    enqueued: dict[str, int] = field(default_factory=dict)  # schedule name → job id
    skipped: list[str] = field(default_factory=list)  # ticks dropped by catch_up="skip"
    lost_race: list[str] = field(default_factory=list)  # another scheduler took the tick


class PeriodicScheduler:
    """Maintenance service: enqueue due ticks of the given schedules.

    ``PeriodicScheduler(q.backend, q.schedules, q.tasks, clock=q.clock)``: the backend's
    periodic verbs, the schedules this process declared, and the task registry (for each job's
    priority and max_attempts). Call ``run_once(now)`` every second or so (more often than the
    shortest interval) from one or many processes: the compare-and-set makes extra schedulers
    harmless. Only the given schedules run here (the code is the source of truth; rows of
    schedules removed from the code stay visible in ``errands periodic`` until deleted).
    """

    name = "periodic"
    interval = 1.0  # tick resolution: schedules of a few seconds still fire on time

    def __init__(
        self,
        backend: PeriodicVerbs,
        schedules: Mapping[str, Schedule],
        tasks: Mapping[str, Task[Any, Any]],
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.backend = backend
        self.schedules = schedules
        self.tasks = tasks
        self.clock = clock

    def run_once(self, now: float | None = None) -> SchedulerReport:
        now = self.clock() if now is None else now
        report = SchedulerReport()
        backend = self.backend
        for row in backend.list_periodic():
            if row.name not in self.schedules:
                continue
            if row.last_succeeded_at is not None and (
                row.stored_succeeded_at is None or row.last_succeeded_at > row.stored_succeeded_at
            ):
                backend.record_periodic_success(row.name, row.last_succeeded_at)
            if row.next_run_at is None or row.next_run_at > now:
                continue
            cron, interval, tz = row.cron, row.interval_seconds, row.timezone
            following = next_tick(cron, interval, tz, row.next_run_at)
            overtaken = following <= now  # a later tick passed too: the scheduler was down
            upcoming = next_tick(cron, interval, tz, now) if overtaken else following
            job = None
            if not overtaken or row.catch_up == "once":
                job = self._job(row, now)
            won, job_id = backend.fire_periodic(row, upcoming, job, now)
            if not won:
                report.lost_race.append(row.name)
            elif job_id is not None:
                report.enqueued[row.name] = job_id
            else:
                report.skipped.append(row.name)
        return report

    def _job(self, row: PeriodicRow, now: float) -> NewJob:
        task = self.tasks.get(row.type)
        opts = task.options if task is not None else None
        return NewJob(
            type=row.type,
            payload=row.payload,
            queue=row.queue,
            priority=0 if opts is None else opts.priority,
            run_at=now,
            max_attempts=DEFAULT_MAX_ATTEMPTS if opts is None else opts.max_attempts,
        )


def describe(row: PeriodicRow, now: float) -> dict[str, Any]:
    """A schedule as ``errands periodic --json`` prints it."""
    reason = overdue_reason(row, now)
    return {
        "name": row.name,
        "type": row.type,
        "queue": row.queue,
        "cron": row.cron,
        "every_seconds": row.interval_seconds,
        "timezone": row.timezone,
        "catch_up": row.catch_up,
        "grace_seconds": row.grace_seconds,
        "next_run_at": None if row.next_run_at is None else _iso(row.next_run_at),
        "last_enqueued_at": None if row.last_enqueued_at is None else _iso(row.last_enqueued_at),
        "last_succeeded_at": (
            None if row.last_succeeded_at is None else _iso(row.last_succeeded_at)
        ),
        "overdue": reason is not None,
        "overdue_reason": reason,
    }
