"""Schedule maths, shared by the scheduler service (``maintenance/scheduler.py``), the Queue's
``@q.periodic`` and the reports: ticks, grace, and when a schedule is overdue.

Timing. A cron schedule's ticks come from ``croniter`` in the schedule's time zone, so DST
follows croniter's documented behaviour: a wall time that does not exist (spring forward) runs
at the next valid time, and an hourly schedule runs at both 02:00s of a fall-back night while a
daily one runs once. An ``every=`` schedule ticks at multiples of its interval since the unix
epoch (every=300 → :00, :05, …), so every process computes the same ticks.

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
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter

from ..errors import ConfigurationError
from .records import to_datetime

CATCH_UP = ("skip", "once")
MIN_GRACE = 60.0


def zone(name: str) -> ZoneInfo:
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


def next_tick(cron: str | None, interval: float | None, tz: str | None, after: float) -> float:
    """The first tick strictly after ``after`` (unix seconds)."""
    if cron is not None:
        start = datetime.fromtimestamp(after, zone(tz or "UTC"))
        return float(croniter(cron, start).get_next(datetime).timestamp())
    assert interval is not None and interval > 0
    return (math.floor(after / interval) + 1) * interval


def prev_tick(cron: str | None, interval: float | None, tz: str | None, at: float) -> float:
    """The last tick at or before ``at``."""
    if cron is not None:
        # croniter's get_prev is strictly before its start: start just after ``at``.
        start = datetime.fromtimestamp(at + 1e-3, zone(tz or "UTC"))
        return float(croniter(cron, start).get_prev(datetime).timestamp())
    assert interval is not None and interval > 0
    return math.floor(at / interval) * interval


def nominal_interval(cron: str | None, interval: float | None, tz: str | None, at: float) -> float:
    if cron is None:
        assert interval is not None
        return interval
    a = next_tick(cron, None, tz, at)
    return next_tick(cron, None, tz, a) - a


class ScheduleState(Protocol):
    """What ``overdue_reason`` reads of a stored schedule (``backends.base.PeriodicRow``)."""

    @property
    def cron(self) -> str | None: ...
    @property
    def interval_seconds(self) -> float | None: ...
    @property
    def timezone(self) -> str | None: ...
    @property
    def grace_seconds(self) -> float | None: ...
    @property
    def next_run_at(self) -> float | None: ...
    @property
    def last_enqueued_at(self) -> float | None: ...
    @property
    def last_succeeded_at(self) -> float | None: ...


def overdue_reason(row: ScheduleState, now: float) -> str | None:
    """Why this schedule is overdue at ``now``, or None (see the module docstring)."""
    grace = row.grace_seconds
    if grace is None:
        grace = max(
            MIN_GRACE, 0.1 * nominal_interval(row.cron, row.interval_seconds, row.timezone, now)
        )
    if row.next_run_at is not None and row.next_run_at < now - grace:
        return f"tick at {iso(row.next_run_at)} was not enqueued: is a scheduler running?"
    if row.last_enqueued_at is None:
        return None  # no tick has come yet
    expected = prev_tick(row.cron, row.interval_seconds, row.timezone, now - grace)
    if row.last_succeeded_at is None:
        if row.last_enqueued_at <= now - grace:
            return f"enqueued at {iso(row.last_enqueued_at)}, never succeeded"
        return None
    if row.last_succeeded_at < expected:
        return f"no success since the tick at {iso(expected)} (last {iso(row.last_succeeded_at)})"
    return None


def iso(epoch: float) -> str:
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
