"""The ``stats`` figures, shaped from the backend's typed rows — for ``Queue.stats``, the CLI
(``errands stats`` and ``check``), ``errands.metrics`` and the dashboard.

Every figure costs a bounded number of rows, however many jobs finished: counts per state come
from live index ranges (queued, running) and the kept ``job_counts`` (final states);
the windows (``last_hour``, the retry histogram) sum ``job_stats_minutely`` rows, per minute,
queue and measure. Windows therefore start at the start of the minute holding ``now - window``
(up to a minute more than asked). Wait and run percentiles come from histograms with the bounds
of ``errands.core.rollup.BOUNDS``: each is the upper bound of the bucket holding the exact value
(never above the largest value seen), as for rolled-up hours.

Definitions (docs/operations.md): *wait* is due → start of a finished job's last attempt; *run*
is start → outcome of each attempt that ended succeeded, failed or cancelled (a retried job
counts each attempt; a lost attempt has no outcome and is not counted).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from .backends.base import PeriodicRow, StateCount, WindowRow
from .backends.verbs import ReadVerbs
from .core import rollup
from .core.records import to_datetime
from .core.schedule import iso, overdue_reason
from .core.states import State
from .maintenance.wal import WAL_INTERVAL, WAL_LARGE_BYTES

OUTCOMES = (State.SUCCEEDED.value, State.FAILED.value, State.CANCELLED.value)


@dataclass(slots=True)
class Measure:
    """Count, total, maximum and histogram of one kind of duration."""

    count: int = 0
    total: float = 0.0
    maximum: float = 0.0
    hist: list[int] = field(default_factory=rollup.empty)

    def add(self, row: WindowRow) -> None:
        self.count += row.count
        self.total += row.total
        self.maximum = max(self.maximum, row.maximum)
        if 0 <= row.bucket < len(self.hist):
            self.hist[row.bucket] += row.count

    def pct(self, p: float) -> float | None:
        return rollup.percentile((), self.hist, self.maximum, p)


@dataclass(slots=True)
class Window:
    """What finished in a window, for one queue or all: jobs per outcome and per attempts
    used, and the wait and run measures."""

    outcomes: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))
    attempts: dict[int, int] = field(default_factory=dict)
    wait: Measure = field(default_factory=Measure)
    run: Measure = field(default_factory=Measure)

    @property
    def processed(self) -> int:
        return sum(self.outcomes.values())

    def add(self, row: WindowRow) -> None:
        if row.measure == "wait":
            self.wait.add(row)
        elif row.measure == "run":
            self.run.add(row)
        else:
            self.outcomes[row.measure] = self.outcomes.get(row.measure, 0) + row.count
            self.attempts[row.bucket] = self.attempts.get(row.bucket, 0) + row.count


def windows(rows: list[WindowRow]) -> tuple[Window, dict[str, Window]]:
    """The window as a whole and per queue."""
    total, per_queue = Window(), dict[str, Window]()
    for row in rows:
        total.add(row)
        per_queue.setdefault(row.queue, Window()).add(row)
    return total, per_queue


def summarize(w: Window, seconds: float) -> dict[str, Any]:
    """Throughput, failure rate and wait/run p50/p95 of a window (``stats.last_hour``)."""
    n = w.processed
    failed = w.outcomes.get(State.FAILED.value, 0)
    return {
        "window_seconds": seconds,
        "processed": n,
        **w.outcomes,
        "per_minute": round(n / (seconds / 60.0), 3),
        "failure_rate": round(failed / n, 4) if n else 0.0,
        "wait_p50": _round(w.wait.pct(0.5)),
        "wait_p95": _round(w.wait.pct(0.95)),
        "run_p50": _round(w.run.pct(0.5)),
        "run_p95": _round(w.run.pct(0.95)),
    }


def last_hour(backend: ReadVerbs, now: float) -> dict[str, Any]:
    total, _ = windows(backend.window_rows(now - rollup.HOUR))
    return summarize(total, rollup.HOUR)


def counts(rows: list[StateCount]) -> dict[str, int]:
    """Every state (even at 0) → its total."""
    out = {s.value: 0 for s in State}
    for r in rows:
        out[r.status] = out.get(r.status, 0) + r.count
    return out


def collect(
    backend: ReadVerbs,
    now: float,
    *,
    alive_seconds: float,
    window: float,
    top: int,
    running_limit: int,
) -> dict[str, Any]:
    """The five questions as one JSON-ready object (see docs/operations.md)."""
    rows = backend.state_counts()
    workers = backend.live_workers(now, alive_seconds)
    unhandled = [  # the queued rows of the counts: no second pass over the queued jobs
        {"queue": r.queue, "type": r.type, "queued": r.count}
        for r in sorted(rows, key=lambda r: (r.queue, r.type))
        if r.status == State.QUEUED.value and not any(handles(w, r.queue, r.type) for w in workers)
    ]
    schedules = describe_all(backend.list_periodic(), workers, now)
    overdue = [
        {"name": p["name"], "type": p["type"], "reason": p["overdue_reason"]}
        for p in schedules
        if p["overdue"]
    ]
    retired = [{"name": p["name"], "type": p["type"]} for p in schedules if p["retired"]]
    disabled = [
        {"name": p["name"], "type": p["type"], "since": p["disabled_at"], "by": p["disabled_by"]}
        for p in schedules
        if p["disabled"]
    ]
    dt = to_datetime(now)
    return {
        "now": None if dt is None else dt.isoformat(),
        "counts": counts(rows),
        "by_queue_type": [
            {"status": r.status, "queue": r.queue, "type": r.type, "count": r.count}
            for r in sorted(rows, key=lambda r: (r.status, r.queue, r.type))
        ],
        "oldest_running": backend.oldest_running(now, alive_seconds, running_limit),
        "oldest_due": backend.oldest_due(now),
        "retries": {
            "window_seconds": window,
            "histogram": backend.retry_histogram(now - window, now),
        },
        "top_errors": backend.top_errors(now - window, top, now),
        "last_hour": last_hour(backend, now),
        "unhandled_types": unhandled,
        "periodic_overdue": overdue,
        "periodic_retired": retired,
        "periodic_disabled": disabled,
        "workers": workers,
        "wal": wal(backend, now, alive_seconds),
    }


def wal(backend: ReadVerbs, now: float, alive_seconds: float) -> dict[str, Any]:
    """SQLite's WAL: its size, how many truncations in a row a live worker saw blocked, and a
    warning naming the cause and the remedy when it is large (None on PostgreSQL)."""
    size = backend.storage()["wal_bytes"]
    blocked = max(
        (c.get("wal_blocked", 0) for c in backend.live_counters(now, alive_seconds)), default=0
    )
    warning = None
    if size is not None and size > WAL_LARGE_BYTES:
        held = (
            f"checkpoints keep failing ({blocked} attempt(s) in a row by a worker): "
            if blocked
            else "checkpoints could not complete: "
        )
        warning = (
            f"the SQLite WAL is {size / 1e6:.1f} MB (over {WAL_LARGE_BYTES / 1e6:.1f} MB); "
            f"{held}a connection holding a read transaction open (an application, a shell, "
            "a backup) keeps it from being folded back; end that transaction, and a running "
            f"worker truncates the WAL within {WAL_INTERVAL:.0f} s (with no worker running: "
            "`errands vacuum`)"
        )
    return {"bytes": size, "checkpoint_blocked": blocked, "warning": warning}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def handles(worker: dict[str, Any], queue: str, jtype: str) -> bool:
    queues, types = worker["queues"], worker["types"]
    # A worker registered without types (an older errands) may handle anything: no alarm.
    return (queues is None or queue in queues) and (types is None or jtype in types)


def _first_hour(now: float, hours: int) -> float:
    return (now // 3600.0 - (hours - 1)) * 3600.0


def _empty_hours(first: float, hours: int) -> dict[float, dict[str, Any]]:
    series: dict[float, dict[str, Any]] = {}
    for i in range(hours):
        hour = first + 3600.0 * i
        series[hour] = {"hour": hour, "succeeded": 0, "failed": 0, "cancelled": 0}
    return series


def hourly_throughput(
    backend: ReadVerbs, now: float, hours: int, queue: str | None = None
) -> list[dict[str, Any]]:
    """Finished jobs per hour over the ``hours`` hours up to ``now``, oldest first, one entry
    per hour, zeros included (``Queue.throughput``); of every queue or of ``queue``."""
    first = _first_hour(now, hours)
    series = _empty_hours(first, hours)
    for hour, outcome, n in backend.hourly_outcomes(first, queue):
        slot = series.get(float(hour))
        if slot is not None and outcome in slot:
            slot[outcome] += n
    return list(series.values())


def retired_names(rows: Iterable[PeriodicRow], workers: Iterable[Mapping[str, Any]]) -> set[str]:
    """The schedules no live worker declares (``workers``: ``live_workers`` rows). Empty when
    no worker is live, or when one does not say what it declares (an older errands)."""
    declared: set[str] = set()
    seen = False
    for w in workers:
        names = w.get("schedules")
        if names is None:
            return set()
        declared.update(names)
        seen = True
    return {r.name for r in rows if r.name not in declared} if seen else set()


def describe_all(
    rows: Iterable[PeriodicRow], workers: Iterable[Mapping[str, Any]], now: float
) -> list[dict[str, Any]]:
    """Every schedule as ``describe`` shows it, retired ones marked (``retired_names``)."""
    rows = list(rows)
    retired = retired_names(rows, workers)
    return [describe(r, now, retired=r.name in retired) for r in rows]


def owed(row: PeriodicRow) -> PeriodicRow:
    """The schedule as the overdue rule should judge it: a schedule enabled again owes no
    tick it skipped while disabled, as if it had last succeeded when it was enabled."""
    if row.enabled_at is None or (row.last_succeeded_at or 0.0) >= row.enabled_at:
        return row
    return replace(row, last_succeeded_at=row.enabled_at)


def describe(row: PeriodicRow, now: float, *, retired: bool = False) -> dict[str, Any]:
    """A schedule as ``errands periodic --json`` prints it."""
    disabled = row.disabled_at is not None
    reason = None if retired or disabled else overdue_reason(owed(row), now)
    return {
        "name": row.name,
        "type": row.type,
        "queue": row.queue,
        "cron": row.cron,
        "every_seconds": row.interval_seconds,
        "timezone": row.timezone,
        "catch_up": row.catch_up,
        "grace_seconds": row.grace_seconds,
        "next_run_at": None if row.next_run_at is None else iso(row.next_run_at),
        "last_enqueued_at": None if row.last_enqueued_at is None else iso(row.last_enqueued_at),
        "last_succeeded_at": (
            None if row.last_succeeded_at is None else iso(row.last_succeeded_at)
        ),
        "first_enqueued_at": (
            None if row.first_enqueued_at is None else iso(row.first_enqueued_at)
        ),
        "retired": retired,
        "disabled": disabled,
        "disabled_at": None if row.disabled_at is None else iso(row.disabled_at),
        "disabled_by": row.disabled_by,
        "overdue": reason is not None,
        "overdue_reason": reason,
    }


def hourly_latency(
    backend: ReadVerbs, now: float, hours: int, queue: str | None = None
) -> list[dict[str, Any]]:
    """Wait and run time p50/p95 per hour over the ``hours`` hours up to ``now``, oldest first,
    one entry per hour (None where nothing finished), from the kept minute figures (8 days),
    of every queue or of ``queue``."""
    first = _first_hour(now, hours)
    measures: dict[tuple[float, str], Measure] = {}
    for hour, measure, bucket, count, maximum in backend.hourly_latency(first, queue):
        m = measures.setdefault((float(hour), measure), Measure())
        m.count += count
        m.maximum = max(m.maximum, maximum)
        if 0 <= bucket < len(m.hist):
            m.hist[bucket] += count
    return _latency_series(first, hours, measures)


def hourly_of_type(
    backend: ReadVerbs, now: float, hours: int, jtype: str, queue: str | None = None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``hourly_throughput`` and ``hourly_latency`` of one job type (and ``queue``): each
    finished job counted once — its outcome, its wait and the run of its last attempt — from
    the rows still kept plus the hourly rollup of pruned ones (the same figures either way)."""
    first = _first_hour(now, hours)
    series = _empty_hours(first, hours)
    measures: dict[tuple[float, str], Measure] = {}
    for row in backend.hourly_of_type(first, jtype, queue):
        slot = series.get(float(row.hour))
        if slot is None:
            continue
        if row.outcome in slot:
            slot[row.outcome] += row.count
        for name, hist, maximum in (
            ("wait", row.wait_hist, row.wait_max),
            ("run", row.run_hist, row.run_max),
        ):
            if not any(hist):
                continue
            m = measures.setdefault((float(row.hour), name), Measure())
            m.count += sum(hist)
            m.maximum = max(m.maximum, maximum)
            m.hist = rollup.merge(m.hist, hist)
    return list(series.values()), _latency_series(first, hours, measures)


def _latency_series(
    first: float, hours: int, measures: dict[tuple[float, str], Measure]
) -> list[dict[str, Any]]:
    series = []
    for i in range(hours):
        hour = first + 3600.0 * i
        entry: dict[str, Any] = {"hour": hour}
        for name in ("wait", "run"):
            got = measures.get((hour, name))
            entry[f"{name}_count"] = 0 if got is None else got.count
            entry[f"{name}_p50"] = None if got is None else _round(got.pct(0.5))
            entry[f"{name}_p95"] = None if got is None else _round(got.pct(0.95))
        series.append(entry)
    return series
