"""The backend protocol: domain verbs of a job queue, each taking ``now``.

Callers (Queue, Worker, CLI, maintenance) only ever speak these verbs; a dialect implements
them with its own named queries. Times are float unix seconds; JSON columns travel as text.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..core.records import Attempt, EventRecord, Job, Step, StepRecord
from .activity import ActivityVerbs


@dataclass(slots=True)  # hot path (one per enqueued job): see ClaimedJob
class NewJob:
    type: str
    payload: str
    queue: str
    priority: int
    run_at: float
    max_attempts: int
    unique_key: str | None = None
    headers: str | None = None  # JSON object text written by enqueue middleware, or None
    limit_key: str | None = None  # the task's errands.Limit key, fixed at enqueue
    limit_group: str | None = None  # its group for this payload ('' when the limit has none)


@dataclass(frozen=True, slots=True)
class EnqueueCall:
    """One enqueue call's checked jobs, its time and actor: a member of a group commit."""

    jobs: Sequence[NewJob]
    now: float
    actor: str


@dataclass(frozen=True, slots=True)
class Needs:
    """What a job enqueued ``after=[…]`` waits for: jobs already stored (``ids``) and jobs
    earlier in the same enqueue (``earlier``: their positions, for chains and batches)."""

    ids: tuple[int, ...] = ()
    earlier: tuple[int, ...] = ()
    on_failure: str = "cancel"  # "cancel" | "run" (on_upstream_failure)


@dataclass(slots=True)
class SweepReport:
    """What one pass of the dependency sweeper repaired (nothing, unless a release was
    missed: every outcome releases its dependents in its own transaction)."""

    closed: int = 0  # open edges to final upstreams, closed as their outcome would have
    settled: list[int] = field(default_factory=list)  # waiting jobs released or cancelled


@dataclass(frozen=True, slots=True)
class ClaimRequest:
    worker_id: str
    types: Sequence[str]
    queues: Sequence[str] | None  # None: every queue
    limit: int
    lease_seconds: float
    # Whether any of ``types`` has a limit (errands.Limit): then the claim also takes limited
    # jobs, within their limits (backends/flow.py); otherwise it reads unlimited jobs only.
    limited: bool = False


# Not frozen: a frozen dataclass's __init__ costs ~4x a plain one (object.__setattr__ per
# field), and one of these is built per job on the hot path. Treat them as read-only.
@dataclass(slots=True)
class ClaimedJob:
    id: int
    queue: str
    type: str
    payload: str
    priority: int
    attempt: int
    max_attempts: int
    run_at: float
    created_at: float
    cancel_requested: bool
    headers: str | None = None  # JSON object text, or None
    # Set for a job a rate limit counted at its claim (the claim's time): its handler must
    # start within the lease of it, and its real start is written to the rate's window with
    # its outcome (backends/flow.py).
    claimed_at: float | None = None
    # Its previous attempt was lost (LOST:LEASE_EXPIRED: its worker died or froze holding
    # it): a worker runs it alone, in quarantine (docs/runtime.md).
    suspect: bool = False


# Outcomes a worker records for the attempts it holds. All are fenced on (job_id, attempt).
@dataclass(slots=True)  # hot path: see ClaimedJob
class Succeeded:
    job_id: int
    attempt: int
    started_at: float
    result: str | None


@dataclass(frozen=True, slots=True)
class Failed:
    """A final failure: the job ends ``failed``."""

    job_id: int
    attempt: int
    started_at: float
    error_code: str
    error_detail: str
    traceback: str | None
    # The handler's exception, for execution middleware (never stored; not compared).
    exception: BaseException | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Retried:
    """A failed attempt whose job runs again at ``retry_at`` (``retry_delay`` after it failed)."""

    job_id: int
    attempt: int
    started_at: float
    error_code: str
    error_detail: str
    traceback: str | None
    retry_at: float
    retry_delay: float = 0.0
    exception: BaseException | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Cancelled:
    job_id: int
    attempt: int
    started_at: float
    error_code: str = "CANCELLED:BY_USER"
    error_detail: str = "cancelled while running"


@dataclass(frozen=True, slots=True)
class Snoozed:
    """The handler raised ``errands.Snooze``: queued again at ``run_at``, one more attempt."""

    job_id: int
    attempt: int
    started_at: float
    run_at: float
    delay: float


@dataclass(frozen=True, slots=True)
class Released:
    job_id: int
    attempt: int


@dataclass(frozen=True, slots=True)
class Suspended:
    """A run ended in ``ctx.sleep`` (queued at ``run_at``) or ``ctx.wait_for`` (``waiting``
    until its signal or timeout ``run_at``), writing ``record``; no attempt used up."""

    job_id: int
    attempt: int
    started_at: float
    waiting: bool
    run_at: float | None
    record: StepRecord | None = None


Outcome = Succeeded | Failed | Retried | Cancelled | Snoozed | Released | Suspended


@dataclass(frozen=True, slots=True)
class JobFilter:
    status: str | None = None
    type: str | None = None
    queue: str | None = None
    error_code: str | None = None
    before_id: int | None = None
    limit: int = 100


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    id: str
    hostname: str
    pid: int
    queues: Sequence[str] | None
    concurrency: int
    types: Sequence[str] | None = None  # the job types it has handlers for
    schedules: Sequence[str] | None = None  # the periodic schedules it declares


@dataclass(slots=True)
class RescueReport:
    recovered: list[int] = field(default_factory=list)  # back to queued
    exhausted: list[int] = field(default_factory=list)  # lost on the last attempt: failed


@dataclass(slots=True)
class CancelReport:
    cancelled: list[int] = field(default_factory=list)  # were queued: now cancelled
    requested: list[int] = field(default_factory=list)  # were running: cancel_requested set


@dataclass(slots=True)
class ActionReport:
    """What an operator's delete, run-now or priority change did to the ids it was given:
    ``changed`` (in the order given), and every other id with the reason it was left alone
    (no such job, a state the action does not take, a waiting job depends on it…)."""

    changed: list[int] = field(default_factory=list)
    refused: dict[int, str] = field(default_factory=dict)


@dataclass(slots=True)
class PruneReport:
    """What one ``Pruner.run_once`` did (or, with ``dry_run``, would do). Kept here beside the
    other reports so the CLI's imports stay put; only the Pruner builds it."""

    dry_run: bool = False
    deleted: dict[str, int] = field(default_factory=dict)  # per state (would delete, if dry)
    batches: int = 0
    interrupted: bool = False  # stopped by should_stop before finishing: rerun to continue
    more: bool = False  # stopped at the pass's max_batches with rows left: run again soon
    checkpointed: bool = False
    activity: int = 0  # activity log rows past their retention deleted (not in ``total``)

    @property
    def total(self) -> int:
        return sum(self.deleted.values())


@dataclass(frozen=True, slots=True)
class PruneProgress:
    state: str
    deleted: int  # so far in this state
    total_deleted: int  # so far in this run
    batches: int


@dataclass(frozen=True, slots=True)
class PeriodicRow:
    """A ``periodic`` row (unix seconds); ``next_run_raw``: as stored, for the compare-and-set."""

    name: str
    cron: str | None
    interval_seconds: float | None
    timezone: str | None
    type: str
    payload: str
    queue: str
    last_enqueued_at: float | None
    next_run_at: float | None
    last_succeeded_at: float | None  # newest known success (stored, or a job still in the table)
    catch_up: str
    grace_seconds: float | None
    stored_succeeded_at: float | None
    next_run_raw: Any
    first_enqueued_at: float | None = None  # the first tick that enqueued a job
    disabled_at: float | None = None  # an operator disabled it: the scheduler skips it
    disabled_by: str | None = None
    enabled_at: float | None = None  # last enabled again: the ticks skipped are not owed


@dataclass(frozen=True, slots=True)
class TaskTypeRow:
    """A ``task_types`` row: the options a task type's jobs take when the process enqueuing
    them has no task of that name (errands.client.declared)."""

    type: str
    queue: str
    priority: int
    max_attempts: int
    timeout_seconds: float | None
    options: dict[str, Any] = field(default_factory=dict)  # room for later options
    declared_by: str | None = None  # the worker id that declared it last
    declared_at: float | None = None


@dataclass(frozen=True, slots=True)
class Graduation:
    """A SQLite file's mark after ``errands graduate``: where it went (redacted), and when."""

    target: str
    at: float


@dataclass(frozen=True, slots=True)
class StateCount:
    """Jobs in one state of one queue and type."""

    status: str
    queue: str
    type: str
    count: int


@dataclass(frozen=True, slots=True)
class WindowRow:
    """One measure of one queue summed over the minutes of a window (``job_stats_minutely``).

    ``measure`` is an outcome (``succeeded``/``failed``/``cancelled``: ``bucket`` is the
    attempts used, ``count`` the jobs), ``wait`` or ``run`` (``bucket`` is the histogram bucket
    of ``errands.core.rollup.BOUNDS``; ``total`` and ``maximum`` in seconds)."""

    measure: str
    queue: str
    bucket: int
    count: int
    total: float
    maximum: float


@dataclass(frozen=True, slots=True)
class TypeHour:
    """Finished jobs of one type in one hour and outcome (``hourly_of_type``): ``count`` jobs,
    histograms of their wait and run (``errands.core.rollup.BOUNDS``; a job cancelled before it
    started is in neither) and the largest of each, in seconds."""

    hour: float
    outcome: str
    count: int
    wait_hist: list[int]
    run_hist: list[int]
    wait_max: float
    run_max: float


class Listener(Protocol):
    def close(self) -> None: ...


# -- the verbs, one protocol per noun (sqlbase.py: one mixin per noun implements each) ------


class JobVerbs(Protocol):
    """Jobs: in (enqueue), the worker's verbs on the attempts it holds, the wake-ups, the
    operator's actions and the reads of whole jobs (backends/jobs.py, jobs_operator.py)."""

    def enqueue(
        self, jobs: Sequence[NewJob], now: float, *, actor: str, connection: Any = None
    ) -> list[int]: ...

    # Several calls, one commit. group_commit: True where sharing a commit is worth a
    # writer queue in the client (SQLite: one writer, an fsync per commit); PostgreSQL
    # commits concurrent connections together in the server already.
    group_commit: bool

    def enqueue_grouped(self, calls: Sequence[EnqueueCall]) -> list[list[int]]: ...
    def claim(self, request: ClaimRequest, now: float) -> list[ClaimedJob]: ...
    def finish(
        self,
        outcomes: Sequence[Outcome],
        worker_id: str,
        now: float,
        held: Sequence[ClaimedJob] | None = None,
    ) -> list[bool]: ...
    def finish_and_claim(
        self,
        outcomes: Sequence[Outcome],
        worker_id: str,
        request: ClaimRequest,
        now: float,
        held: Sequence[ClaimedJob] | None = None,
    ) -> tuple[list[bool], list[ClaimedJob]]: ...
    def complete_in(
        self, connection: Any, outcome: Succeeded, worker_id: str, now: float
    ) -> bool: ...
    def heartbeat(
        self, worker_id: str, held: Sequence[tuple[int, int]], lease_seconds: float, now: float
    ) -> list[bool]: ...
    def cancel_requested(self, job_ids: Sequence[int]) -> list[int]: ...
    def next_due(self, types: Sequence[str], queues: Sequence[str] | None) -> float | None: ...
    # wake-ups: a dialect hook each (sqlite.py: datagrams; postgres.py: LISTEN/NOTIFY)
    def listen(self, on_change: Callable[[], None], *, completions: bool = False) -> Listener: ...
    def listen_finished(self, on_finish: Callable[[frozenset[int] | None], None]) -> Listener: ...
    # operator actions
    def retry(self, job_ids: Sequence[int], actor: str, now: float) -> list[int]: ...
    def cancel(self, job_ids: Sequence[int], actor: str, now: float) -> CancelReport: ...
    def match_ids(
        self, status: str, *, type: str | None, queue: str | None, error_code: str | None
    ) -> list[int]: ...
    def delete_jobs(self, job_ids: Sequence[int], actor: str, now: float) -> ActionReport: ...
    def run_now(self, job_ids: Sequence[int], actor: str, now: float) -> ActionReport: ...
    def set_priority(
        self, job_ids: Sequence[int], priority: int, actor: str, now: float
    ) -> ActionReport: ...
    # reads
    def get_job(self, job_id: int) -> Job | None: ...
    def list_jobs(self, flt: JobFilter) -> list[Job]: ...
    def newest_job_id(self) -> int | None: ...
    def search_jobs(self, flt: JobFilter, text: str, floor_id: int) -> list[Job]: ...
    def attempts(self, job_id: int) -> list[Attempt]: ...
    def events(self, job_id: int) -> list[EventRecord]: ...
    def blob(self, ref: str) -> str | None: ...


class DepVerbs(Protocol):
    """Dependencies between jobs (backends/deps.py, docs/pipelines.md): jobs enqueued after others,
    the graph around a job, and the sweeper's repair."""

    def enqueue_after(
        self,
        jobs: Sequence[NewJob],
        needs: Sequence[Needs | None],
        now: float,
        *,
        actor: str,
        connection: Any = None,
    ) -> list[int]: ...
    def upstream(self, job_id: int) -> list[tuple[Job, str]]: ...
    def downstream(self, job_id: int) -> list[tuple[Job, str]]: ...
    def upstream_counts(self, job_id: int) -> dict[str, int]: ...
    def unreleased(self, limit: int) -> int: ...
    def sweep_waiting(self, now: float, *, limit: int = 1000) -> SweepReport: ...


class LeaderVerbs(Protocol):
    """Maintenance roles and the recovery of lost attempts (backends/leader.py)."""

    def try_lead(self, name: str, holder: str, ttl: float, now: float) -> bool: ...
    def resign(self, name: str, holder: str) -> None: ...
    def rescue(self, now: float, *, limit: int = 1000) -> RescueReport: ...
    def recover_workers(self, worker_ids: Sequence[str], now: float) -> RescueReport: ...
    def host_workers(self, hostname: str) -> list[tuple[str, int]]: ...


class WorkerVerbs(Protocol):
    """The registry of worker processes (backends/workers.py)."""

    def register_worker(self, info: WorkerInfo, now: float) -> None: ...
    def worker_seen(
        self, worker_id: str, now: float, counters: Mapping[str, int] | None = None
    ) -> None: ...
    def worker_stopped(
        self, worker_id: str, now: float, counters: Mapping[str, int] | None = None
    ) -> None: ...
    def worker_counters(self) -> dict[str, int]: ...
    def live_workers(self, now: float, alive_seconds: float) -> list[dict[str, Any]]: ...
    def live_counters(self, now: float, alive_seconds: float) -> list[dict[str, int]]: ...


class PeriodicVerbs(Protocol):
    """Periodic schedules (backends/periodic.py); what ``PeriodicScheduler`` takes."""

    def upsert_periodic(self, row: PeriodicRow) -> None: ...
    def list_periodic(self) -> list[PeriodicRow]: ...
    def fire_periodic(
        self, row: PeriodicRow, next_run_at: float, job: NewJob | None, now: float
    ) -> tuple[bool, int | None]: ...
    def record_periodic_success(self, name: str, succeeded_at: float) -> None: ...
    def remove_periodic(self, name: str) -> bool: ...
    def disable_periodic(self, name: str, actor: str, now: float) -> bool | None: ...
    def enable_periodic(self, name: str, next_run_at: float, now: float) -> bool | None: ...
    def run_periodic(self, name: str, job: NewJob, actor: str, now: float) -> int | None: ...


class TaskTypeVerbs(Protocol):
    """Declared task options and the database's own facts (backends/task_types.py)."""

    def declare_task_types(self, rows: Sequence[TaskTypeRow], now: float) -> None: ...
    def task_types(self) -> list[TaskTypeRow]: ...
    def mark_graduated(self, target: str, now: float) -> None: ...
    def graduation(self) -> Graduation | None: ...
    def reopen(self) -> bool: ...


class RetentionVerbs(Protocol):
    """Retention and storage (backends/retention.py); the ``Pruner`` runs the loop."""

    def prune_count(self, state: str, cutoff: float) -> int: ...
    def prune_batch(self, state: str, cutoff: float, limit: int) -> int: ...
    def tidy_figures(self, now: float) -> None: ...
    def recount_figures(self, now: float) -> None: ...
    def checkpoint(self, *, wait: bool = True) -> bool: ...
    def vacuum(self) -> dict[str, int | None]: ...
    def storage(self) -> dict[str, int | None]: ...


class StatsVerbs(Protocol):
    """Typed rows for errands.reports, the metrics and the dashboard (backends/stats.py)."""

    def state_counts(self) -> list[StateCount]: ...
    def window_rows(self, since: float) -> list[WindowRow]: ...
    def hourly_outcomes(
        self, since: float, queue: str | None = None
    ) -> list[tuple[float, str, int]]: ...
    def hourly_latency(
        self, since: float, queue: str | None = None
    ) -> list[tuple[float, str, int, int, float]]: ...
    def hourly_of_type(self, since: float, jtype: str, queue: str | None) -> list[TypeHour]: ...
    def rollup_totals(self) -> list[tuple[str, str, str, int]]: ...
    def queued_types(self) -> list[tuple[str, str, int]]: ...
    def retry_histogram(self, since: float, now: float | None = None) -> dict[str, int]: ...
    def top_errors(
        self, since: float, limit: int, now: float | None = None
    ) -> list[dict[str, Any]]: ...
    def running_past_lease(self, now: float, grace: float) -> int: ...
    def snoozing_jobs(self, min_attempts: int, limit: int) -> list[dict[str, Any]]: ...
    def oldest_due(self, now: float) -> dict[str, Any] | None: ...
    def oldest_due_by_queue(self, now: float) -> dict[str, dict[str, Any]]: ...
    def error_sample(self, error_code: str, jtype: str) -> dict[str, Any] | None: ...
    def oldest_running(
        self, now: float, alive_seconds: float, limit: int
    ) -> list[dict[str, Any]]: ...


@dataclass(frozen=True, slots=True)
class LimitSpec:
    """A limit's caps: at most ``running`` holding a lease, at most ``rate_count`` starts in
    any ``rate_seconds`` (None: no cap of that kind)."""

    key: str
    running: int | None = None
    rate_count: int | None = None
    rate_seconds: float | None = None


class FlowVerbs(Protocol):
    """Flow control (backends/flow.py): paused queues, limits, progress."""

    def pause_queue(self, queue: str, reason: str | None, actor: str, now: float) -> None: ...
    def resume_queue(self, queue: str) -> list[str]: ...
    def paused_queues(self) -> list[dict[str, Any]]: ...
    def active_queue_counts(self) -> list[dict[str, Any]]: ...
    # alive_seconds > 0: refuse caps that differ from those a live worker declared (flow.py).
    def register_limits(
        self, limits: Sequence[LimitSpec], now: float, alive_seconds: float = 0.0
    ) -> None: ...
    def refresh_limits(self, limits: Sequence[LimitSpec], now: float) -> list[str]: ...
    def set_limit(self, spec: LimitSpec, actor: str, now: float) -> None: ...
    def clear_limit(self, key: str) -> bool: ...
    def limit_caps(self) -> list[dict[str, Any]]: ...
    def limit_usage(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]: ...
    # When rate-limited handlers really started: (job_id, claimed_at, started_at) each; their
    # outcomes write it too (flow.py).
    def record_starts(self, starts: Sequence[tuple[int, float, float]]) -> None: ...
    def record_progress(
        self,
        worker_id: str,
        job_id: int,
        attempt: int,
        progress: float,
        message: str | None,
        now: float,
    ) -> bool: ...


class SchemaVerbs(Protocol):
    """The schema and the connections (backends/schema.py and the dialect)."""

    prefix: str  # the table prefix in use ('' for none; prefix.py)

    def migrate(self) -> None: ...
    def table(self, name: str) -> str: ...
    def schema_version(self) -> int: ...
    def close(self) -> None: ...
    def check_identity(self) -> None: ...  # DatabaseReplacedError: the file was swapped


class StepVerbs(Protocol):
    """Durable steps, sleeps and signals (backends/steps.py, docs/durable-steps.md)."""

    def record_step(self, record: StepRecord, now: float) -> bool: ...
    def record_step_in(self, connection: Any, record: StepRecord, now: float) -> bool: ...
    def own_transaction(self, connection: Any) -> Any: ...  # a context manager
    def take_signal(self, record: StepRecord, now: float) -> tuple[bool, str | None]: ...
    def steps(self, job_id: int) -> list[Step]: ...
    def journal(self, job_id: int) -> list[dict[str, Any]]: ...  # as the worker replays it
    def send_signal(  # target: a job id or a unique_key
        self, target: int | str, name: str, payload: str | None, actor: str, now: float
    ) -> int: ...
    def wake_waits(self, now: float, *, limit: int = 1000) -> list[int]: ...
    def reset_steps(self, job_ids: Sequence[int]) -> int: ...
    def durable_counts(self, now: float, grace: float) -> dict[str, int]: ...


class Backend(
    JobVerbs,
    StepVerbs,
    DepVerbs,
    LeaderVerbs,
    WorkerVerbs,
    PeriodicVerbs,
    TaskTypeVerbs,
    RetentionVerbs,
    ActivityVerbs,
    StatsVerbs,
    FlowVerbs,
    SchemaVerbs,
    Protocol,
):
    """What every storage dialect implements: the verbs of every noun, each taking ``now``
    where time matters. ``sqlbase.SQLBackend`` writes them once over named queries;
    ``sqlite.py`` and ``postgres.py`` supply connections and the dialect hooks."""

    dialect: str
