"""What the backend's verbs take and give: the rows and reports of a job queue (the verbs
themselves: verbs.py). Times are float unix seconds; JSON columns travel as text.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core.records import ActivityEntry, StepRecord
from ..core.timerules import TimeRules


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
    rules: TimeRules | None = None  # unique_for… (docs/flow-control.md); None: none given


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
    # The fair keys among ``types`` (errands.Fair), each with its weights: the limited claim
    # serves their values in turn (backends/fair.py).
    fair: Mapping[str, FairWeights] = field(default_factory=dict)
    # The ordered keys among ``types`` (order=), each with whether a failed head blocks it:
    # the limited claim takes of each value only its head (backends/order.py).
    order: Mapping[str, bool] = field(default_factory=dict)
    # Scan from the front, not from where this claimer last found work (claim_position.py):
    # what a burst asks before it decides nothing is left.
    from_front: bool = False


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
    """The handler raised ``errands.Snooze``: the job is queued again at ``run_at`` with one
    more attempt allowed."""

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
class Audit:
    """The activity log's row for an operator verb, written in the verb's own transaction, so
    the change and its row commit together or not at all (docs/dashboard.md, "Activity").
    Inside the transaction ``entry`` is given the verb's result and returns the row as it then
    stands (None: no row, as for a schedule that does not exist); the first transaction
    inserts it, a later one of the same action (a bulk action's next chunk of ids) updates
    its count and detail (``row_id``)."""

    entry: Callable[[Any], ActivityEntry | None]
    row_id: int | None = None


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
    """A ``periodic`` row; times are unix seconds. ``next_run_raw`` is the column as stored,
    bound back unchanged into the compare-and-set."""

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
    """A SQLite file's mark after ``errands graduate``: where its queue went (password
    redacted) and when."""

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


@dataclass(frozen=True, slots=True)
class FairWeights:
    """A fair key's weights: starts per turn of each value (``default`` for the others)."""

    weights: Mapping[str, float] = field(default_factory=dict)
    default: float = 1.0

    def of(self, value: str) -> float:
        """The weight of ``value``."""
        return self.weights.get(value, self.default)


@dataclass(frozen=True, slots=True)
class LimitSpec:
    """A limit's caps: at most ``running`` holding a lease, at most ``rate_count`` starts in
    any ``rate_seconds`` (None: no cap of that kind)."""

    key: str
    running: int | None = None
    rate_count: int | None = None
    rate_seconds: float | None = None


@dataclass(frozen=True, slots=True)
class TableHealth:
    """One of errands' tables as the statistics collector sees it (its counts trail by about
    a second). ``name`` carries the installation's table prefix."""

    name: str
    live_tuples: int
    dead_tuples: int
    last_vacuum_at: float | None  # the last VACUUM of either kind, unix seconds
    last_autovacuum_at: float | None
    autovacuum_on: bool  # the server's switch and the table's own autovacuum_enabled
    bytes: int


@dataclass(frozen=True, slots=True)
class HorizonHolder:
    """Something that keeps VACUUM from reclaiming dead tuples in this database: an open
    transaction (its snapshot or its id), a standby's feedback (its walsender), a replication
    slot's xmin, or a prepared transaction."""

    kind: str  # 'transaction', 'standby feedback', 'replication slot', 'prepared transaction'
    name: str | None  # the slot's name or the prepared transaction's gid
    pid: int | None
    application_name: str | None
    client_addr: str | None
    started_at: float | None  # when the transaction began (None for a slot: it keeps no time)
    query_start: float | None
    state: str | None
    query: str | None
    xid_age: int  # transactions started since the one it holds

    def age(self, now: float) -> float | None:
        """Seconds it has held the horizon, where that is known (not for a slot)."""
        return None if self.started_at is None else max(0.0, now - self.started_at)
