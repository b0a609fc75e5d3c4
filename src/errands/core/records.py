"""Read models: what ``Queue.get``, ``attempts``, ``events`` and ``activity`` return.

Attributes mirror the public table columns one to one. Timestamps are timezone-aware UTC
datetimes on every backend; payloads, results and event details are decoded JSON.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from . import validate

_FIRST = datetime.min.replace(tzinfo=UTC)
_LAST = datetime.max.replace(tzinfo=UTC)


def to_datetime(epoch: float | None) -> datetime | None:
    """A stored time as an aware datetime. errands never stores a time outside the years
    1-9999, but a row written by hand (or by an older errands) may hold one: it reads as the
    nearest representable moment instead of breaking every read with an OverflowError."""
    if epoch is None:
        return None
    try:
        return datetime.fromtimestamp(epoch, UTC)
    except (OverflowError, ValueError, OSError):
        return _FIRST if epoch < 0 else _LAST  # NaN compares False: the far end


def to_epoch(value: datetime | float | int | None) -> float | None:
    if value is None:
        return None
    return validate.epoch(value, "time")


def _jsonable(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value


@dataclass(frozen=True, slots=True)
class Job:
    id: int
    queue: str
    type: str
    payload: Any
    status: str
    priority: int
    attempts: int
    max_attempts: int
    run_at: datetime | None
    created_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    worker_id: str | None
    heartbeat_at: datetime | None
    lease_expires_at: datetime | None
    unique_key: str | None
    error_code: str | None
    error_detail: str | None
    result: Any
    payload_ref: str | None
    result_ref: str | None
    cancel_requested: bool
    headers: dict[str, Any] | None = None  # written by enqueue middleware (e.g. traceparent)
    # Flow control (docs/flow-control.md): the limit the job counts against, fixed at enqueue
    # ('' group: the key's only group), and the latest ctx.progress() of its attempt.
    limit_key: str | None = None
    limit_group: str | None = None
    progress: float | None = None
    progress_message: str | None = None
    progress_at: datetime | None = None
    # Time rules (docs/flow-control.md): seconds the unique_key stays taken after success;
    # the key of a debounced job (kept apart from unique_key: see migration 16); how long
    # after it is due the job may still start, and that start-by time (None once lifted);
    # the time after which no attempt starts (created_at + deadline; None once lifted).
    unique_for: float | None = None
    debounce_key: str | None = None
    expires_in: float | None = None
    expires_at: datetime | None = None
    deadline_at: datetime | None = None

    def to_dict(self) -> dict[str, Any]:
        """Every column as a JSON-ready value (datetimes as ISO 8601 UTC)."""
        return {k: _jsonable(v) for k, v in asdict(self).items()}


@dataclass(frozen=True, slots=True)
class Attempt:
    id: int
    job_id: int
    attempt: int
    worker_id: str | None
    started_at: datetime | None
    finished_at: datetime | None
    status: str
    error_code: str | None
    error_detail: str | None
    traceback_ref: str | None

    def to_dict(self) -> dict[str, Any]:
        """Every column as a JSON-ready value (datetimes as ISO 8601 UTC)."""
        return {k: _jsonable(v) for k, v in asdict(self).items()}


@dataclass(frozen=True, slots=True)
class EventRecord:
    id: int
    job_id: int
    ts: datetime | None
    event: str
    actor: str | None
    detail: Any

    def to_dict(self) -> dict[str, Any]:
        """Every column as a JSON-ready value (datetimes as ISO 8601 UTC)."""
        return {k: _jsonable(v) for k, v in asdict(self).items()}


@dataclass(frozen=True, slots=True)
class Step:
    """A recorded durable call of a job (``job_steps``, docs/durable-steps.md): a ``step``
    (its JSON result), a ``sleep`` (``wake_at``: when it ends) or a ``wait`` for a signal
    (``wake_at``: its timeout; ``finished_at`` None while it waits; ``result`` ``{"payload":
    …}`` or ``{"timeout": true}``)."""

    job_id: int
    seq: int
    kind: str
    name: str
    attempt: int
    started_at: datetime | None
    finished_at: datetime | None
    result: Any
    wake_at: datetime | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: _jsonable(v) for k, v in asdict(self).items()}


@dataclass(frozen=True, slots=True)
class StepRecord:
    """A durable call the worker records in ``job_steps`` (backends/steps.py), fenced on
    its attempt."""

    job_id: int
    attempt: int
    seq: int
    kind: str  # step | sleep | wait
    name: str
    started_at: float
    finished_at: float | None = None
    result: str | None = None  # JSON text
    wake_at: float | None = None  # a sleep's end, a wait's timeout
    signal: str | None = None  # a wait's signal name, and which of them it takes (1, 2…):
    ordinal: int | None = None  # see migration_0012.sql


@dataclass(frozen=True, slots=True)
class ActivityEntry:
    """One operator action (``operator_actions``): who, what, on what, how many, when; the
    filter that chose the jobs and a short ``detail``, both JSON-ready. ``id`` is 0 until
    stored."""

    at: datetime
    actor: str
    action: str
    target: str | None = None
    count: int = 0
    filter: dict[str, Any] | None = None
    detail: dict[str, Any] | None = None
    id: int = 0

    def to_dict(self) -> dict[str, Any]:
        """Every column as a JSON-ready value (``at`` as ISO 8601 UTC)."""
        return {k: _jsonable(v) for k, v in asdict(self).items()}
