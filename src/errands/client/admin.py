"""The Queue's reads and operator actions, as two mixins ``errands.Queue`` inherits: each
speaks only to the backend's verbs, the settings and the clock, so the Queue module keeps to
construction, tasks, enqueueing and running."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import limits, pipelines
from ..backends.base import Backend, CancelReport, JobFilter, PruneProgress, PruneReport
from ..core import validate
from ..core.records import Attempt, EventRecord, Job
from ..core.settings import Duration, Settings, seconds
from ..core.states import State
from ..errors import ConfigurationError, InvalidTransitionError, JobNotFoundError
from ..maintenance.pruner import Pruner
from . import reports as stats

MAX_BATCH = 1_000_000  # prune's rows per transaction


class _Parts:
    """What both mixins read of the Queue."""

    backend: Backend
    settings: Settings
    clock: Callable[[], float]


class Reads(_Parts):
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
        return self.backend.attempts(validate.job_id(job_id))

    def events(self, job_id: int) -> list[EventRecord]:
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

    def upstream(self, job_id: int) -> list[Job]:
        """The jobs ``job_id`` was enqueued after, in id order."""
        return [job for job, _ in self.backend.upstream(validate.job_id(job_id))]

    def downstream(self, job_id: int) -> list[Job]:
        """The jobs enqueued after ``job_id``, in id order."""
        return [job for job, _ in self.backend.downstream(validate.job_id(job_id))]


class Actions(_Parts):
    """Operator actions: cancel, retry, prune, recount, vacuum."""

    def prune(
        self,
        now: float | None = None,
        dry_run: bool = False,
        batch_size: int = 1000,
        *,
        progress: Callable[[PruneProgress], None] | None = None,
        should_stop: Callable[[], bool] | None = None,
    ) -> PruneReport:
        """Delete finished jobs past ``retention`` (rolled up first), ``batch_size`` rows per
        transaction; rerunnable and interruptible (``should_stop``). See
        errands.maintenance.pruner."""
        pruner = Pruner(
            self.backend,
            self.settings.retention,
            batch_size=validate.integer(batch_size, "batch_size", 1, MAX_BATCH),
            progress=progress,
            should_stop=should_stop,
        )
        return pruner.run_once(
            self.clock() if now is None else validate.epoch(now, "now"),
            dry_run=validate.flag(dry_run, "dry_run"),
        )

    def recount_figures(self) -> None:
        """Rebuild the figures ``stats`` reads from the rows, after a change made by hand."""
        self.backend.recount_figures(self.clock())

    def vacuum(self) -> dict[str, int | None]:
        """Shrink the database file (locks it while it runs: off-peak)."""
        return self.backend.vacuum()

    def cancel(self, job_id: int, *, actor: str = "api") -> str:
        """Cancel a waiting or queued job (→ ``cancelled``; the jobs waiting for it too) or
        ask a running one to stop (→ ``cancel_requested``). Returns which happened."""
        report: CancelReport = self.backend.cancel([validate.job_id(job_id)], actor, self.clock())
        if report.cancelled:
            return "cancelled"
        if report.requested:
            return "cancel_requested"
        job = self._must_get(job_id)
        raise InvalidTransitionError(
            f"job {job_id} is {job.status}; only waiting, queued or running jobs can be cancelled"
        )

    def retry(self, job_id: int, *, actor: str = "api") -> None:
        """Run a failed or cancelled job again now, with at least one more attempt."""
        if not self.backend.retry([validate.job_id(job_id)], actor, self.clock()):
            job = self._must_get(job_id)
            raise InvalidTransitionError(
                f"job {job_id} is {job.status}; only failed or cancelled jobs can be retried"
            )

    def _must_get(self, job_id: int) -> Job:
        job = self.backend.get_job(job_id)
        if job is None:
            raise JobNotFoundError(f"no job with id {job_id}; list jobs with `errands jobs`")
        return job
