"""The Queue's reads and operator actions, as two mixins ``errands.Queue`` inherits: each
speaks only to the backend's verbs, the settings and the clock, so the Queue module keeps to
construction, tasks, enqueueing and running."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from functools import partial
from typing import Any

from .. import limits
from .. import reports as stats
from ..backends.base import (
    Audit,
    Graduation,
    JobFilter,
    PruneProgress,
    PruneReport,
)
from ..core import validate
from ..core.options import EnqueueOptions
from ..core.records import ActivityEntry, Attempt, EventRecord, Job
from ..core.schedule import next_tick
from ..core.settings import Duration, seconds
from ..core.states import State
from ..core.steps import WAIT_GRACE
from ..errors import ConfigurationError, InvalidTransitionError, JobNotFoundError
from ..maintenance.pruner import Pruner
from ..middleware import encode_headers
from ..reports import describe_all
from . import bulk, pipelines
from .activity import IDS_KEPT, ActivityLog, jobs_target
from .parts import QueueParts

MAX_BATCH = 1_000_000  # prune's rows per transaction
MAX_IDS = 10_000  # ids one delete / run_now / set_priority call may name
log = logging.getLogger("errands")


class Reads(QueueParts):
    """Jobs, attempts, events and the ``stats`` figures, read for people and dashboards."""

    def get(self, job_id: int) -> Job | None:
        """The job with every column as an attribute, or None."""
        return self.backend.get_job(validate.job_id(job_id))

    def jobs(
        self,
        *,
        status: str | None = None,
        type: str | None = None,
        queue: str | None = None,
        error_code: str | None = None,
        limit: int = 100,
        before_id: int | None = None,
    ) -> list[Job]:
        """Jobs matching the filters, newest first; page with ``before_id``."""
        if status is not None and status not in {s.value for s in State}:
            raise ConfigurationError(
                f"unknown status {status!r}; use one of {', '.join(s.value for s in State)}"
            )
        validate.integer(limit, "limit", 1, validate.INT64_MAX)
        if before_id is not None:
            validate.job_id(before_id, "before_id")
        for label, value in (("type", type), ("queue", queue), ("error_code", error_code)):
            validate.filter_text(value, label)
        return self.backend.list_jobs(
            JobFilter(
                status=status,
                type=type,
                queue=queue,
                error_code=error_code,
                before_id=before_id,
                limit=limit,
            )
        )

    def attempts(self, job_id: int) -> list[Attempt]:
        """The job's attempts, oldest first (``job_attempts``)."""
        return self.backend.attempts(validate.job_id(job_id))

    def events(self, job_id: int) -> list[EventRecord]:
        """The job's events, oldest first: its whole story (``job_events``)."""
        return self.backend.events(validate.job_id(job_id))

    def traceback(self, attempt: Attempt) -> str | None:
        """The full traceback of a failed attempt (kept outside the row)."""
        return None if attempt.traceback_ref is None else self.backend.blob(attempt.traceback_ref)

    def stats(
        self,
        *,
        window: Duration = 86400.0,
        top: int = 10,
        running_limit: int = 10,
        now: float | None = None,
    ) -> dict[str, Any]:
        """The five questions in one JSON-ready object: ``counts`` (every state), counts
        ``by_queue_type``, ``oldest_running`` (with worker liveness), ``oldest_due``,
        ``retries`` and ``top_errors`` over ``window``, ``last_hour`` throughput and wait/run
        p50/p95, ``unhandled_types``, ``periodic_overdue``, ``periodic_retired``, live ``workers``,
        ``paused_queues`` and ``limits`` (flow control)."""
        out = stats.collect(
            self.backend,
            self.clock() if now is None else validate.epoch(now, "now"),
            alive_seconds=self.settings.lease_seconds,
            window=seconds(window, "window"),
            top=validate.integer(top, "top", 1, validate.INT32_MAX),
            running_limit=validate.integer(running_limit, "running_limit", 1, validate.INT32_MAX),
        )
        # Flow control: the paused queues (by whom, since when, why) and the limits.
        # Each queue's counts are read only when something is paused (most of the time
        # nothing is, and counting the queued jobs per queue cost the overview 100-200 ms on
        # PostgreSQL at 100,000 queued).
        paused = self.backend.paused_queues()
        queues = limits.queues(self.backend) if paused else []
        out["paused_queues"] = [i.to_dict() for i in queues if i.paused]
        out["limits"] = [i.to_dict() for i in limits.limits(self.backend)]
        # Durable steps (docs/durable-steps.md): jobs sleeping or parked for a signal.
        out["durable"] = self.backend.durable_counts(self.clock(), WAIT_GRACE)
        return out

    def errors(
        self, *, top: int = 10, since: Duration = 86400.0, now: float | None = None
    ) -> list[dict[str, Any]]:
        """The most frequent error codes (with type, count and last seen) over ``since``."""
        now = self.clock() if now is None else validate.epoch(now, "now")
        since_s = seconds(since, "since")
        return self.backend.top_errors(
            now - since_s, validate.integer(top, "top", 1, validate.INT32_MAX), now
        )

    def workers(self, *, now: float | None = None) -> list[dict[str, Any]]:
        """Live workers (seen within ``lease_seconds``, not stopped), newest heartbeat first —
        the same rows as ``stats()["workers"]``."""
        return self.backend.live_workers(
            self.clock() if now is None else now, self.settings.lease_seconds
        )

    def throughput(self, *, hours: int = 24, now: float | None = None) -> list[dict[str, Any]]:
        """Finished jobs per hour over the last ``hours`` hours, oldest first, one entry per hour
        (zeros included): ``{"hour": epoch of its start, "succeeded", "failed", "cancelled"}``.
        Pruned jobs included: hours the kept minute figures cover come from them,
        older hours from the rows still in the table plus the hourly rollup of pruned ones."""
        if type(hours) is not int or not 1 <= hours <= 24 * 31:
            raise ConfigurationError(f"hours must be a whole number from 1 to 744, got {hours!r}")
        return stats.hourly_throughput(self.backend, self.clock() if now is None else now, hours)

    def get_batch(self, batch_id: int) -> pipelines.BatchInfo:
        """A batch (``batch.id``): its callback's status and its members per state."""
        return pipelines.get_batch(self.backend, validate.job_id(batch_id))

    def graph(self, job_id: int) -> dict[str, list[dict[str, Any]]]:
        """The jobs around one: ``upstream`` (it runs after them) and ``downstream`` (they
        run after it), each ``{id, type, status, on_upstream_failure}``."""
        return pipelines.graph(self.backend, validate.job_id(job_id))

    def periodic_report(self, *, now: float | None = None) -> list[dict[str, Any]]:
        """Every stored schedule with its state: next and last runs, overdue or disabled or
        retired (no live worker declares it) — what ``errands periodic`` and the dashboard
        show."""
        now = self.clock() if now is None else validate.epoch(now, "now")
        workers = self.backend.live_workers(now, self.settings.lease_seconds)
        return describe_all(self.backend.list_periodic(), workers, now)

    def graduation(self) -> Graduation | None:
        """Where ``errands graduate`` moved this database's queue (the target, redacted, and
        when), or None if it was never moved."""
        return self.backend.graduation()

    def upstream(self, job_id: int) -> list[Job]:
        """The jobs ``job_id`` was enqueued after, in id order."""
        return [job for job, _ in self.backend.upstream(validate.job_id(job_id))]

    def downstream(self, job_id: int) -> list[Job]:
        """The jobs enqueued after ``job_id``, in id order."""
        return [job for job, _ in self.backend.downstream(validate.job_id(job_id))]


class Actions(ActivityLog):
    """Operator actions: cancel, retry, prune, recount, vacuum, graduation's mark; each that
    changes the queue leaves one row in the activity log (``activity``)."""

    def mark_graduated(self, target: str, *, now: float | None = None) -> None:
        """Mark this database's queue as moved to ``target`` (a URL, password hidden): from
        then on it takes no new work and names ``target`` (``errands graduate`` calls it once
        every row is copied and checked)."""
        if not isinstance(target, str) or not target.strip():
            raise ConfigurationError(f"target must be the URL the queue moved to, got {target!r}")
        now = self.clock() if now is None else validate.epoch(now, "now")
        self.backend.mark_graduated(target, now)

    def reopen(self) -> bool:
        """Lift ``errands graduate``'s mark so this database takes work again (``errands
        reopen``); False when it was not marked."""
        return self.backend.reopen()

    def prune(
        self,
        now: float | None = None,
        dry_run: bool = False,
        batch_size: int = 1000,
        *,
        progress: Callable[[PruneProgress], None] | None = None,
        should_stop: Callable[[], bool] | None = None,
        actor: str = "api",
    ) -> PruneReport:
        """Delete finished jobs past ``retention`` (rolled up first), ``batch_size`` rows per
        transaction, and activity log rows past ``retention["activity"]``; rerunnable and
        interruptible (``should_stop``). A real run (not ``dry_run``) is logged in the
        activity log under ``actor``, by each transaction that deletes: the row counts what
        was deleted so far, and says ``interrupted`` until the run ends whole. See
        errands.maintenance.pruner."""
        actor = _actor(actor)

        def row(report: PruneReport) -> ActivityEntry:
            return self._activity_entry(
                "prune",
                actor=actor,
                count=report.total,
                detail={
                    "deleted": report.deleted,
                    "activity": report.activity,
                    "interrupted": report.interrupted,
                },
            )

        dry_run = validate.flag(dry_run, "dry_run")
        pruner = Pruner(
            self.backend,
            self.settings.retention,
            batch_size=validate.integer(batch_size, "batch_size", 1, MAX_BATCH),
            progress=progress,
            should_stop=should_stop,
            row=None if dry_run else row,
        )
        return pruner.run_once(
            self.clock() if now is None else validate.epoch(now, "now"), dry_run=dry_run
        )

    def recount_figures(self) -> None:
        """Rebuild the figures ``stats`` reads from the rows, after a change made by hand."""
        self.backend.recount_figures(self.clock())

    def vacuum(self) -> dict[str, int | None]:
        """Shrink the database file (locks it while it runs: off-peak)."""
        return self.backend.vacuum()

    # -- actions on jobs: one implementation (act), for one id, many, or a filter
    # (select_jobs first: the count a person confirms). The CLI and the dashboard call these.

    def select_jobs(
        self,
        action: str,
        status: str,
        *,
        type: str | None = None,
        queue: str | None = None,
        error_code: str | None = None,
    ) -> list[int]:
        """The ids of the jobs in ``status`` (and of ``type``, in ``queue``, with
        ``error_code``) that ``action`` ("retry", "cancel", "delete", "run_now", "priority")
        may take: the selection ``act`` is then given."""
        allowed = bulk.SELECTABLE.get(action)
        if allowed is None:
            raise ConfigurationError(
                f"unknown action {action!r:.40}; use one of {', '.join(bulk.SELECTABLE)}"
            )
        if status not in allowed:
            raise ConfigurationError(
                f"status {status!r:.40} cannot be used to {action}; choose one of "
                f"{', '.join(sorted(allowed))}"
            )
        return self.backend.match_ids(
            status,
            type=validate.filter_text(type, "type"),
            queue=validate.filter_text(queue, "queue"),
            error_code=validate.filter_text(error_code, "error_code"),
        )

    def act(
        self,
        action: str,
        job_ids: Sequence[int],
        *,
        actor: str = "api",
        priority: int | None = None,
        selected_by: Mapping[str, Any] | None = None,
    ) -> bulk.BulkReport:
        """Do ``action`` to ``job_ids``, 500 per transaction, each job fenced on its state (one
        that moved on is skipped or refused with why, never forced): "retry" (failed or
        cancelled: run again), "cancel" (waiting or queued: cancelled; running: asked to
        stop), "delete", "run_now", "priority" (with ``priority=``). Every operator action
        on jobs, from the Python API, the CLI or the dashboard, runs here, and leaves one row
        in the activity log: ``actor``, the action, how many jobs it changed, and
        ``selected_by`` (the filter ``select_jobs`` chose the ids by, if any)."""
        ids = [validate.job_id(i) for i in job_ids]
        actor = _actor(actor)
        if action not in bulk.SELECTABLE:
            raise ConfigurationError(
                f"unknown action {action!r:.40}; use one of {', '.join(bulk.SELECTABLE)}"
            )

        def row(report: bulk.BulkReport) -> ActivityEntry:
            detail: dict[str, Any] = {
                "asked": len(ids),
                "changed": report.changed[:IDS_KEPT],
                "skipped": report.skipped,
            }
            if report.requested:
                detail["stop_requested"] = report.requested[:IDS_KEPT]
            if action == "priority":
                detail["priority"] = priority
            return self._activity_entry(
                action,
                actor=actor,
                target=jobs_target(ids) if ids else None,
                count=len(report.changed) + len(report.requested),
                filter=selected_by,
                detail=detail,
            )

        report = self._act(action, ids, actor, priority, row)
        if not ids:  # no transaction ran: the row says nothing was asked
            self.backend.record_activity(row(report))
        return report

    def _act(
        self,
        action: str,
        ids: list[int],
        actor: str,
        priority: int | None,
        row: Callable[[bulk.BulkReport], ActivityEntry],
    ) -> bulk.BulkReport:
        b, now = self.backend, self.clock()
        if action == "retry":
            return bulk.chunked(lambda c, a: b.retry(c, actor, now, audit=a), ids, row)
        if action == "cancel":
            return bulk.chunked(lambda c, a: b.cancel(c, actor, now, audit=a), ids, row)
        if action == "run_now":
            return bulk.chunked(lambda c, a: b.run_now(c, actor, now, audit=a), ids, row)
        if action == "priority":
            p = validate.integer(priority, "priority", *validate.PRIORITY_RANGE)
            return bulk.chunked(lambda c, a: b.set_priority(c, p, actor, now, audit=a), ids, row)
        if action == "delete":
            report = bulk.chunked(lambda c, a: b.delete_jobs(c, actor, now, audit=a), ids, row)
            if report.changed:  # a deleted job's events go with it: the log keeps who and which
                shown = ", ".join(map(str, report.changed[:50]))
                more = f" … ({len(report.changed)} in all)" if len(report.changed) > 50 else ""
                log.info("jobs deleted by %s: %s%s", actor, shown, more)
            return report
        raise ConfigurationError(
            f"unknown action {action!r:.40}; use one of {', '.join(bulk.SELECTABLE)}"
        )

    def cancel(self, job_id: int, *, actor: str = "api") -> str:
        """Cancel a waiting or queued job (→ ``cancelled``; the jobs waiting for it too) or
        ask a running one to stop (→ ``cancel_requested``). Returns which happened."""
        report = self.act("cancel", [validate.job_id(job_id)], actor=actor)
        if report.changed:
            return "cancelled"
        if report.requested:
            return "cancel_requested"
        job = self._must_get(job_id)
        raise InvalidTransitionError(
            f"job {job_id} is {job.status}; only waiting, queued or running jobs can be cancelled"
        )

    def retry(self, job_id: int, *, actor: str = "api", reset_steps: bool = False) -> None:
        """Run a failed or cancelled job again now, with at least one more attempt.
        ``reset_steps``: forget its recorded durable steps first, so it starts over
        (after a STEP:MISMATCH: docs/durable-steps.md)."""
        if reset_steps:
            self.backend.reset_steps([validate.job_id(job_id)])
        if not self.act("retry", [validate.job_id(job_id)], actor=actor).changed:
            job = self._must_get(job_id)
            raise InvalidTransitionError(
                f"job {job_id} is {job.status}; only failed or cancelled jobs can be retried"
            )

    def delete(self, *job_ids: int, actor: str = "api") -> bulk.BulkReport:
        """Delete jobs with their attempts and events (which go with them: a deleted job
        leaves no event; the delete is logged at INFO with the actor and the ids). Any state
        but ``running`` (cancel it first), and never a job a ``waiting`` job depends on. A
        finished job's outcome stays in the hourly rollup, as prune keeps it. Returns the ids
        deleted (``changed``) and why each other one was not (``refused``)."""
        return self.act("delete", _ids(job_ids), actor=actor)

    def run_now(self, *job_ids: int, actor: str = "api") -> bulk.BulkReport:
        """Make queued jobs whose ``run_at`` is ahead (scheduled, or a retry waiting out its
        backoff) due now; each writes a ``RESCHEDULED`` event (old and new ``run_at``)."""
        return self.act("run_now", _ids(job_ids), actor=actor)

    def set_priority(self, priority: int, *job_ids: int, actor: str = "api") -> bulk.BulkReport:
        """Give queued or waiting jobs a new priority (higher runs first); each writes a
        ``PRIORITY_CHANGED`` event (old and new)."""
        validate.integer(priority, "priority", *validate.PRIORITY_RANGE)
        return self.act("priority", _ids(job_ids), actor=actor, priority=priority)

    # -- periodic schedules ----------------------------------------------------------------

    def disable_periodic(self, name: str, *, actor: str = "api") -> bool:
        """Stop a schedule enqueuing its ticks (until ``enable_periodic``); not overdue while
        disabled. True if this disabled it, False if it already was."""
        actor = _actor(actor)
        audit = self._periodic_audit("periodic_disable", actor, name)
        done = self.backend.disable_periodic(_schedule_name(name), actor, self.clock(), audit=audit)
        if done is None:
            raise _no_schedule(name)
        return done

    def enable_periodic(self, name: str, *, actor: str = "api") -> bool:
        """Enable a disabled schedule: its next tick is the first after now (the ticks it
        skipped are not caught up, nor owed). True if this enabled it, False if it was not
        disabled."""
        actor = _actor(actor)
        now = self.clock()
        row = self._schedule(name)
        upcoming = next_tick(row.cron, row.interval_seconds, row.timezone, now)
        audit = self._periodic_audit("periodic_enable", actor, row.name)
        done = self.backend.enable_periodic(row.name, upcoming, now, audit=audit)
        if done is None:
            raise _no_schedule(name)
        return done

    def remove_periodic(self, name: str, *, actor: str = "api") -> None:
        """Delete a schedule's row (its jobs stay as they are). Refused while a live worker
        declares it (it would come back): remove its ``@q.periodic`` and redeploy first."""
        name = _schedule_name(name)
        actor = _actor(actor)
        workers = self.backend.live_workers(self.clock(), self.settings.lease_seconds)
        holders = [w["id"] for w in workers if name in (w.get("schedules") or ())]
        if holders:
            raise InvalidTransitionError(
                f"schedule {name!r} is declared by live worker(s) {', '.join(holders[:5])}: it "
                "would come back; remove its @q.periodic from the code and redeploy first, "
                "then remove it"
            )
        row = partial(self._activity_entry, "periodic_remove", actor=actor, target=name, count=1)
        if not self.backend.remove_periodic(
            name, audit=Audit(lambda gone: row() if gone else None)
        ):
            raise _no_schedule(name)
        log.info("schedule %r removed by %s", name, actor)

    def run_periodic(self, name: str, *, actor: str = "api") -> int:
        """Enqueue one run of a schedule now, outside its ticks (its next tick is not moved),
        disabled or not; the job is marked manual (headers ``periodic`` and ``trigger``:
        ``manual``) and its ``ENQUEUED`` event names ``actor``. Returns the job's id."""
        actor = _actor(actor)
        row = self._schedule(name)
        # Checked as an enqueue checks it (the task's or the declared options, its limit),
        # then marked manual: a tick's job has no such headers.
        (job,) = self._producer.one(
            row.type, json.loads(row.payload), EnqueueOptions(queue=row.queue)
        ).jobs
        job = replace(job, headers=encode_headers({"periodic": row.name, "trigger": "manual"}))
        audit = Audit(
            lambda job_id: self._activity_entry(
                "periodic_run", actor=actor, target=row.name, count=1, detail={"job_id": job_id}
            )
        )
        job_id = self.backend.run_periodic(row.name, job, actor, self.clock(), audit=audit)
        if job_id is None:
            raise _no_schedule(name)
        return job_id

    def _periodic_audit(self, action: str, actor: str, name: str) -> Audit:
        """A schedule action's row: its count is whether it changed the schedule (a bool);
        none when there is no such schedule (None: refused, as unknown input is)."""
        return Audit(
            lambda done: (
                None
                if done is None
                else self._activity_entry(action, actor=actor, target=name, count=int(done))
            )
        )

    def _schedule(self, name: str) -> Any:
        name = _schedule_name(name)
        for row in self.backend.list_periodic():
            if row.name == name:
                return row
        raise _no_schedule(name)

    def _must_get(self, job_id: int) -> Job:
        job = self.backend.get_job(job_id)
        if job is None:
            raise JobNotFoundError(f"no job with id {job_id}; list jobs with `errands jobs`")
        return job


def _ids(job_ids: Sequence[int]) -> list[int]:
    if not job_ids:
        raise ConfigurationError("name at least one job id")
    if len(job_ids) > MAX_IDS:
        raise ConfigurationError(
            f"at most {MAX_IDS:,} job ids at once (got {len(job_ids):,}); split the list"
        )
    return [validate.job_id(i) for i in job_ids]


def _actor(actor: str) -> str:
    return validate.text(actor, "actor", max_bytes=200)


def _schedule_name(name: str) -> str:
    # A schedule is named by its task (validate.name): text both backends store, so a NUL or
    # a lone surrogate is refused here with its reason instead of failing in the driver.
    return validate.text(name, "schedule name")


def _no_schedule(name: str) -> JobNotFoundError:
    return JobNotFoundError(
        f"no periodic schedule named {name!r:.80}; list them with `errands periodic`"
    )
