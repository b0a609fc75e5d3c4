"""The backend protocol: domain verbs of a job queue, one protocol per noun, each verb
taking ``now`` where time matters.

Callers (Queue, Worker, CLI, maintenance) only ever speak these verbs; a dialect implements
them with its own named queries (sqlbase.py: one mixin per noun). The reads are protocols of
their own (``JobReads``…, all of them ``ReadVerbs``): what ``Queue.reads`` hands the CLI and
the dashboard.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from ..core.records import Attempt, EventRecord, Job, Step, StepRecord
from .activity import ActivityReads, ActivityVerbs
from .base import (
    ActionReport,
    Audit,
    CancelReport,
    ClaimedJob,
    ClaimRequest,
    EnqueueCall,
    Graduation,
    HorizonHolder,
    JobFilter,
    LimitSpec,
    Needs,
    NewJob,
    Outcome,
    PeriodicRow,
    RescueReport,
    StateCount,
    Succeeded,
    SweepReport,
    TableHealth,
    TaskTypeRow,
    TypeHour,
    WindowRow,
    WorkerInfo,
)


class Listener(Protocol):
    def close(self) -> None: ...


# -- the verbs, one protocol per noun (sqlbase.py: one mixin per noun implements each) ------


class JobReads(Protocol):
    """The reads of whole jobs (backends/jobs.py, jobs_operator.py)."""

    def get_job(self, job_id: int) -> Job | None: ...
    def list_jobs(self, flt: JobFilter) -> list[Job]: ...
    def newest_job_id(self) -> int | None: ...
    def search_jobs(self, flt: JobFilter, text: str, floor_id: int) -> list[Job]: ...
    def snoozed_jobs(  # the snoozed view: (jobs, attempts looked at, their lowest job id)
        self, flt: JobFilter, scan: int, floor_id: int = 0
    ) -> tuple[list[Job], int, int | None]: ...
    def match_ids(  # the ids an operator action by filter would select
        self, status: str, *, type: str | None, queue: str | None, error_code: str | None
    ) -> list[int]: ...
    def attempts(self, job_id: int) -> list[Attempt]: ...
    def events(self, job_id: int) -> list[EventRecord]: ...
    def blob(self, ref: str) -> str | None: ...


class JobVerbs(JobReads, Protocol):
    """Jobs: in (enqueue), the worker's verbs on the attempts it holds, the wake-ups, the
    operator's actions and the reads of whole jobs (backends/jobs.py, jobs_operator.py)."""

    def enqueue(  # audit: the activity row of an enqueue by hand, in its transaction
        self,
        jobs: Sequence[NewJob],
        now: float,
        *,
        actor: str,
        connection: Any = None,
        audit: Audit | None = None,
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
        *,
        recorded: list[Outcome] | None = None,
    ) -> list[bool]: ...
    def finish_and_claim(
        self,
        outcomes: Sequence[Outcome],
        worker_id: str,
        request: ClaimRequest,
        now: float,
        held: Sequence[ClaimedJob] | None = None,
        *,
        recorded: list[Outcome] | None = None,
    ) -> tuple[list[bool], list[ClaimedJob]]: ...
    def complete_in(
        self, connection: Any, outcome: Succeeded, worker_id: str, now: float
    ) -> bool: ...
    def heartbeat(
        self, worker_id: str, held: Sequence[tuple[int, int]], lease_seconds: float, now: float
    ) -> list[bool]: ...
    def cancel_requested(self, job_ids: Sequence[int]) -> list[int]: ...
    def next_due(
        self, types: Sequence[str], queues: Sequence[str] | None, after: float = 0.0
    ) -> float | None: ...
    # wake-ups: a dialect hook each (sqlite.py: datagrams; postgres.py: LISTEN/NOTIFY)
    def listen(self, on_change: Callable[[], None], *, completions: bool = False) -> Listener: ...
    def listen_finished(self, on_finish: Callable[[frozenset[int] | None], None]) -> Listener: ...
    # operator actions
    # audit: the activity log's row, written in the verb's own transaction (base.Audit).
    def retry(
        self, job_ids: Sequence[int], actor: str, now: float, *, audit: Audit | None = None
    ) -> list[int]: ...
    def cancel(
        self, job_ids: Sequence[int], actor: str, now: float, *, audit: Audit | None = None
    ) -> CancelReport: ...
    def delete_jobs(
        self, job_ids: Sequence[int], actor: str, now: float, *, audit: Audit | None = None
    ) -> ActionReport: ...
    def run_now(
        self, job_ids: Sequence[int], actor: str, now: float, *, audit: Audit | None = None
    ) -> ActionReport: ...
    def set_priority(
        self,
        job_ids: Sequence[int],
        priority: int,
        actor: str,
        now: float,
        *,
        audit: Audit | None = None,
    ) -> ActionReport: ...


class DepReads(Protocol):
    """The graph around a job, and the jobs left waiting on finished ones (backends/deps.py)."""

    def upstream(self, job_id: int) -> list[tuple[Job, str]]: ...
    def downstream(self, job_id: int) -> list[tuple[Job, str]]: ...
    def upstream_counts(self, job_id: int) -> dict[str, int]: ...
    def unreleased(self, limit: int) -> int: ...


class DepVerbs(DepReads, Protocol):
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
        audit: Audit | None = None,
    ) -> list[int]: ...
    def sweep_waiting(self, now: float, *, limit: int = 1000) -> SweepReport: ...


class LeaderVerbs(Protocol):
    """Maintenance roles, the recovery of lost attempts (backends/leader.py), and the end of
    jobs past their expires_in or deadline (backends/expiry.py)."""

    def try_lead(self, name: str, holder: str, ttl: float, now: float) -> bool: ...
    def resign(self, name: str, holder: str) -> None: ...
    def rescue(self, now: float, *, limit: int = 1000) -> RescueReport: ...
    def recover_workers(self, worker_ids: Sequence[str], now: float) -> RescueReport: ...
    def host_workers(self, hostname: str) -> list[tuple[str, int]]: ...
    def expire(self, now: float, limit: int) -> list[int]: ...
    def fail_past_deadline(self, now: float, limit: int) -> list[int]: ...


class WorkerReads(Protocol):
    """Who is alive and what they counted (backends/workers.py)."""

    def worker_counters(self) -> dict[str, int]: ...
    def live_workers(self, now: float, alive_seconds: float) -> list[dict[str, Any]]: ...
    def live_counters(self, now: float, alive_seconds: float) -> list[dict[str, int]]: ...


class WorkerVerbs(WorkerReads, Protocol):
    """The registry of worker processes (backends/workers.py)."""

    def register_worker(self, info: WorkerInfo, now: float) -> None: ...
    def worker_seen(
        self, worker_id: str, now: float, counters: Mapping[str, int] | None = None
    ) -> None: ...
    def worker_stopped(
        self, worker_id: str, now: float, counters: Mapping[str, int] | None = None
    ) -> None: ...


class PeriodicReads(Protocol):
    """The stored schedules (backends/periodic.py)."""

    def list_periodic(self) -> list[PeriodicRow]: ...


class PeriodicVerbs(PeriodicReads, Protocol):
    """Periodic schedules (backends/periodic.py); what ``PeriodicScheduler`` takes."""

    def upsert_periodic(self, row: PeriodicRow) -> None: ...
    def fire_periodic(
        self, row: PeriodicRow, next_run_at: float, job: NewJob | None, now: float
    ) -> tuple[bool, int | None]: ...
    def record_periodic_success(self, name: str, succeeded_at: float) -> None: ...
    # audit: the activity log's row, written in the verb's own transaction (base.Audit).
    def remove_periodic(self, name: str, *, audit: Audit | None = None) -> bool: ...
    def disable_periodic(
        self, name: str, actor: str, now: float, *, audit: Audit | None = None
    ) -> bool | None: ...
    def enable_periodic(
        self, name: str, next_run_at: float, now: float, *, audit: Audit | None = None
    ) -> bool | None: ...
    def run_periodic(
        self, name: str, job: NewJob, actor: str, now: float, *, audit: Audit | None = None
    ) -> int | None: ...


class TaskTypeReads(Protocol):
    """Declared task options and where the queue moved (backends/task_types.py)."""

    def task_types(self) -> list[TaskTypeRow]: ...
    def graduation(self) -> Graduation | None: ...


class TaskTypeVerbs(TaskTypeReads, Protocol):
    """Declared task options and the database's own facts (backends/task_types.py)."""

    def declare_task_types(self, rows: Sequence[TaskTypeRow], now: float) -> None: ...
    def mark_graduated(self, target: str, now: float) -> None: ...
    def reopen(self) -> bool: ...


class RetentionReads(Protocol):
    """What a prune would take and what the storage holds (backends/retention.py)."""

    def prune_count(self, state: str, cutoff: float, *, now: float) -> int: ...
    def storage(self) -> dict[str, int | None]: ...


class RetentionVerbs(RetentionReads, Protocol):
    """Retention and storage (backends/retention.py); the ``Pruner`` runs the loop."""

    def prune_batch(
        self, state: str, cutoff: float, limit: int, *, now: float, audit: Audit | None = None
    ) -> int: ...
    def tidy_figures(self, now: float) -> None: ...
    def recount_figures(self, now: float) -> None: ...
    def checkpoint(self, *, wait: bool = True) -> bool: ...
    def vacuum(self) -> dict[str, int | None]: ...


class VacuumReads(Protocol):
    """Dead tuples and the xmin horizon (backends/vacuum.py; PostgreSQL's, empty on SQLite)."""

    def table_health(self) -> list[TableHealth]: ...
    def horizon_holders(self, *, limit: int = 20) -> list[HorizonHolder]: ...
    def vacuum_leader(self, now: float) -> str | None: ...


class VacuumVerbs(VacuumReads, Protocol):
    """The vacuum maintenance service's one write-side verb: a plain VACUUM of one table."""

    def vacuum_table(self, name: str) -> None: ...


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


class FlowReads(Protocol):
    """Paused queues, the queues in use, and the limits with their usage (backends/flow.py)."""

    def paused_queues(self) -> list[dict[str, Any]]: ...
    def active_queue_counts(self) -> list[dict[str, Any]]: ...
    def limit_caps(self) -> list[dict[str, Any]]: ...
    def limit_usage(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]: ...
    # Fair share (backends/fair.py): the keys with stored turns, and per key and value the
    # jobs due, queued and running, and the attempts started since ``since``.
    def fair_keys(self) -> list[str]: ...
    def fair_usage(self, keys: Sequence[str], now: float, since: float) -> list[dict[str, Any]]: ...
    # Order per key (backends/order.py): the values of blocking ordered keys a failed head
    # holds back, each with its head's id.
    def order_blocked(self, keys: Sequence[str], now: float) -> list[dict[str, Any]]: ...


class FlowVerbs(FlowReads, Protocol):
    """Flow control (backends/flow.py): paused queues, limits, progress."""

    def pause_queue(
        self, queue: str, reason: str | None, actor: str, now: float, *, audit: Audit | None = None
    ) -> None: ...
    def resume_queue(self, queue: str, *, audit: Audit | None = None) -> list[str]: ...
    # alive_seconds > 0: refuse caps that differ from those a live worker declared (flow.py).
    def register_limits(
        self, limits: Sequence[LimitSpec], now: float, alive_seconds: float = 0.0
    ) -> None: ...
    def refresh_limits(self, limits: Sequence[LimitSpec], now: float) -> list[str]: ...
    def set_limit(
        self, spec: LimitSpec, actor: str, now: float, *, audit: Audit | None = None
    ) -> None: ...
    def clear_limit(self, key: str, *, audit: Audit | None = None) -> bool: ...
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


class SchemaReads(Protocol):
    """The table names and the applied schema version (backends/schema.py)."""

    prefix: str  # the table prefix in use ('' for none; prefix.py)

    def table(self, name: str) -> str: ...
    def schema_version(self) -> int: ...


class SchemaVerbs(SchemaReads, Protocol):
    """The schema and the connections (backends/schema.py and the dialect)."""

    def migrate(self) -> None: ...
    def close(self) -> None: ...
    def check_identity(self) -> None: ...  # DatabaseReplacedError: the file was swapped


class StepReads(Protocol):
    """A job's recorded steps, and the sleeping and waiting jobs (backends/steps.py)."""

    def steps(self, job_id: int) -> list[Step]: ...
    def journal(self, job_id: int) -> list[dict[str, Any]]: ...  # as the worker replays it
    def durable_counts(self, now: float, grace: float) -> dict[str, int]: ...


class StepVerbs(StepReads, Protocol):
    """Durable steps, sleeps and signals (backends/steps.py, docs/durable-steps.md)."""

    def record_step(self, record: StepRecord, now: float) -> bool: ...
    def record_step_in(self, connection: Any, record: StepRecord, now: float) -> bool: ...
    def own_transaction(self, connection: Any) -> Any: ...  # a context manager
    def take_signal(self, record: StepRecord, now: float) -> tuple[bool, str | None]: ...
    def send_signal(  # target: a job id or a unique_key
        self,
        target: int | str,
        name: str,
        payload: str | None,
        actor: str,
        now: float,
        *,
        audit: Audit | None = None,
    ) -> int: ...
    def wake_waits(self, now: float, *, limit: int = 1000) -> list[int]: ...
    def reset_steps(self, job_ids: Sequence[int]) -> int: ...


class ReadVerbs(
    JobReads,
    StepReads,
    DepReads,
    WorkerReads,
    PeriodicReads,
    TaskTypeReads,
    RetentionReads,
    VacuumReads,
    ActivityReads,
    StatsVerbs,
    FlowReads,
    SchemaReads,
    Protocol,
):
    """The verbs that only read: what the CLI, the dashboard and errands.reports reach
    through ``Queue.reads``. Every change goes through a Queue method instead, so what an
    action does (its fence, its chunks, its log line, its actor) is written once;
    tests/test_front_door.py holds that no implementation of these opens a write."""

    dialect: str


class Backend(
    ReadVerbs,
    JobVerbs,
    StepVerbs,
    DepVerbs,
    LeaderVerbs,
    WorkerVerbs,
    PeriodicVerbs,
    TaskTypeVerbs,
    RetentionVerbs,
    VacuumVerbs,
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
