"""Schedule maths, shared by the scheduler service (``maintenance/scheduler.py``), the Queue's
``@q.periodic`` and the reports: ticks, grace, and when a schedule is overdue.

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
schedule's type, persisted on the schedule so it outlives pruning) — for a schedule that has
never succeeded, when its first enqueued tick is ``grace`` old — or when its next tick is
more than ``grace`` in the past (no scheduler is running). Either way it stays overdue from
tick to tick until a success: it does not flap.

Retired: a schedule that no live worker declares while live workers say which schedules they
declare (its ``@q.periodic`` was removed from the code) is retired, never overdue; with no
live worker at all, nothing is retired (then "is a scheduler running?" is the question).
``errands periodic remove NAME`` deletes its row (``reports.py``: ``retired_names``).

Default grace: 10% of the interval, at least 60 s. That is the spec's "last success older
than interval + grace", made exact for irregular cron schedules (weekdays only, say).
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


def _fixed_hours(cron: str) -> bool:
    """Whether the hour field names hours (``30 1 * * *``, ``0 9,17 * * 1-5``) rather than
    stepping through all of them (``*``, ``*/2``)."""
    return not cron.split()[1].startswith("*")


def _second_pass(tick: datetime, where: ZoneInfo) -> bool:
    """Whether ``tick`` is the second time its wall time is shown on a fall-back night
    (01:30 EST after 01:30 EDT in New York)."""
    wall = tick.replace(tzinfo=None)
    first = wall.replace(tzinfo=where, fold=0)
    return (
        first.timestamp() < tick.timestamp()
        and datetime.fromtimestamp(first.timestamp(), where).replace(tzinfo=None) == wall
    )


def _cron_ticks(cron: str, where: ZoneInfo, start: datetime, forward: bool) -> float:
    """croniter's next (or previous) tick, leaving out the second pass of a fall-back night
    for schedules with fixed hours: a daily ``30 1 * * *`` runs once that night, as cron
    users expect (Vixie cron does the same), while ``0 * * * *`` runs at both 01:00s, each a
    real hour apart. croniter itself returns both 01:30s."""
    it = croniter(cron, start)
    skip_repeats = _fixed_hours(cron)
    while True:
        tick = it.get_next(datetime) if forward else it.get_prev(datetime)
        if not (skip_repeats and _second_pass(tick, where)):
            return float(tick.timestamp())


def next_tick(cron: str | None, interval: float | None, tz: str | None, after: float) -> float:
    """The first tick strictly after ``after`` (unix seconds)."""
    if cron is not None:
        where = zone(tz or "UTC")
        return _cron_ticks(cron, where, datetime.fromtimestamp(after, where), forward=True)
    assert interval is not None and interval > 0
    return (math.floor(after / interval) + 1) * interval


def prev_tick(cron: str | None, interval: float | None, tz: str | None, at: float) -> float:
    """The last tick at or before ``at``."""
    if cron is not None:
        # croniter's get_prev is strictly before its start: start just after ``at``.
        where = zone(tz or "UTC")
        return _cron_ticks(cron, where, datetime.fromtimestamp(at + 1e-3, where), forward=False)
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
    @property
    def first_enqueued_at(self) -> float | None: ...


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
        # Measured from the first tick that enqueued (not the latest, which moves on with
        # every tick: a schedule failing every minute would never read overdue).
        first = row.first_enqueued_at or row.last_enqueued_at
        if first <= now - grace:
            return f"never succeeded since its first tick, enqueued at {iso(first)}"
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
