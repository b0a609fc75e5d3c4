"""The periodic scheduler service: enqueues each due tick of the schedules this process
declared, exactly once however many schedulers run (the maths: ``core/schedule.py``).

Exactly once per tick. ``periodic.next_run_at`` holds the next tick. A scheduler that finds it
due moves it, with a compare-and-set from the value it read, to the following tick and inserts
the job in the same transaction: however many schedulers run, one wins each tick, forever (the
row outlives every job, unlike a ``unique_key``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..backends.base import NewJob, PeriodicRow
from ..backends.verbs import PeriodicVerbs
from ..core.options import EnqueueOptions
from ..core.schedule import Schedule, next_tick
from ..tasks import TaskOptions

if TYPE_CHECKING:
    from ..tasks import Task


def schedule_row(schedule: Schedule, next_run_at: float) -> PeriodicRow:
    """The row a declared schedule is stored as."""
    return PeriodicRow(
        name=schedule.name,
        cron=schedule.cron,
        interval_seconds=schedule.interval,
        timezone=schedule.timezone,
        type=schedule.name,
        payload=schedule.payload,
        queue=schedule.queue,
        last_enqueued_at=None,
        next_run_at=next_run_at,
        last_succeeded_at=None,
        catch_up=schedule.catch_up,
        grace_seconds=schedule.grace,
        stored_succeeded_at=None,
        next_run_raw=next_run_at,
    )


_NO_TASK = TaskOptions()  # a type this process has no task for: the defaults


@dataclass(slots=True)
class SchedulerReport:
    enqueued: dict[str, int] = field(default_factory=dict)  # schedule name → job id
    skipped: list[str] = field(default_factory=list)  # ticks dropped by catch_up="skip"
    lost_race: list[str] = field(default_factory=list)  # another scheduler took the tick
    disabled: list[str] = field(default_factory=list)  # due, but an operator disabled it


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
            if row.disabled_at is not None:  # an operator disabled it: no tick is enqueued
                report.disabled.append(row.name)
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
        """A tick's job, built as every enqueue builds one (its task's defaults and limit,
        in its schedule's queue)."""
        task = self.tasks.get(row.type)
        opts = task.options if task is not None else _NO_TASK
        payload = None if opts.limit is None else json.loads(row.payload)  # for its group
        return opts.job(row.type, row.payload, payload, now, EnqueueOptions(queue=row.queue))
