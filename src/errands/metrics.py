"""Prometheus metrics, read from the database at scrape time.

``render_metrics(q)`` returns the text exposition format (what ``errands metrics`` prints and
the dashboard's ``/metrics`` serves). A custom collector on a registry made per call reads the
database on each scrape: nothing is kept in process globals, so any process — a worker, the
dashboard, a cron job — reports the same numbers. Needs ``prometheus_client``
(``pip install 'errands[web]'``).

Label sets are bounded: ``state`` has five values and ``outcome`` three; ``(queue, type)``
pairs come from the application's code, and beyond ``MAX_SERIES`` of them the smallest are
summed into ``type="__other__"``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

from . import limits
from . import reports as stats
from .core import rollup
from .core.states import State
from .core.steps import WAIT_GRACE
from .errors import ConfigurationError
from .reports import describe_all

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

    from .backends.base import HorizonHolder, PeriodicRow, StateCount, TableHealth, WindowRow
    from .core.settings import Settings

MAX_SERIES = 200
OTHER = "__other__"


def _prometheus() -> Any:
    try:
        import prometheus_client
        import prometheus_client.core
    except ImportError:
        raise ConfigurationError(
            "Prometheus metrics need the prometheus_client package: "
            "pip install 'errands[web]' (or pip install prometheus-client)"
        ) from None
    return prometheus_client


def _bounded(
    rows: dict[tuple[str, ...], float], type_index: int = 1
) -> dict[tuple[str, ...], float]:
    """Keep the MAX_SERIES largest series; fold the rest into type=__other__."""
    if len(rows) <= MAX_SERIES:
        return rows
    ranked = sorted(rows.items(), key=lambda kv: -kv[1])
    out: dict[tuple[str, ...], float] = dict(ranked[: MAX_SERIES - 1])
    for labels, value in ranked[MAX_SERIES - 1 :]:
        key = (*labels[:type_index], OTHER, *labels[type_index + 1 :])
        out[key] = out.get(key, 0) + value
    return out


class MetricsVerbs(Protocol):
    """The part of a backend the metrics read."""

    def state_counts(self) -> list[StateCount]: ...
    def rollup_totals(self) -> list[tuple[str, str, str, int]]: ...
    def window_rows(self, since: float) -> list[WindowRow]: ...
    def worker_counters(self) -> dict[str, int]: ...
    def oldest_due(self, now: float) -> dict[str, Any] | None: ...
    def running_past_lease(self, now: float, grace: float) -> int: ...
    def live_workers(self, now: float, alive_seconds: float) -> list[dict[str, Any]]: ...
    def list_periodic(self) -> list[PeriodicRow]: ...
    def storage(self) -> dict[str, int | None]: ...
    # flow control (limits.queues / limits.limits read these)
    def paused_queues(self) -> list[dict[str, Any]]: ...
    def active_queue_counts(self) -> list[dict[str, Any]]: ...
    def limit_caps(self) -> list[dict[str, Any]]: ...
    def limit_usage(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]: ...
    # durable steps (docs/durable-steps.md)
    def durable_counts(self, now: float, grace: float) -> dict[str, int]: ...
    # dead tuples and the xmin horizon (PostgreSQL; errands.horizon)
    def table_health(self) -> list[TableHealth]: ...
    def horizon_holders(self, *, limit: int = 20) -> list[HorizonHolder]: ...


class ErrandsCollector:
    """Yields errands' metrics read through ``backend`` at ``clock()``; a worker counts as
    alive when seen within ``lease_seconds``."""

    def __init__(
        self, backend: MetricsVerbs, clock: Callable[[], float], lease_seconds: float
    ) -> None:
        self.backend = backend
        self.clock = clock
        self.lease_seconds = lease_seconds

    def collect(self) -> Iterator[Metric]:
        core = _prometheus().core
        b = self.backend
        now = self.clock()

        jobs = core.GaugeMetricFamily(
            "errands_jobs", "Jobs by state, queue and type.", labels=["state", "queue", "type"]
        )
        current: dict[tuple[str, ...], float] = {}
        finished: dict[tuple[str, ...], float] = defaultdict(float)
        for c in b.state_counts():
            current[(c.status, c.queue, c.type)] = c.count
            if c.status in stats.OUTCOMES:
                finished[(c.queue, c.type, c.status)] += c.count
        for labels, value in sorted(_bounded(current, 2).items()):
            jobs.add_metric(list(labels), value)
        yield jobs
        totals = core.GaugeMetricFamily(
            "errands_jobs_in_state", "Jobs per state (every state, even at 0).", labels=["state"]
        )
        for state in State:
            totals.add_metric([state.value], sum(v for k, v in current.items() if k[0] == state))
        yield totals

        # Counters: rows still in the table plus rolled-up (pruned) rows, so pruning does
        # not make them go down.
        for queue, jtype, outcome, n in b.rollup_totals():
            finished[(queue, jtype, outcome)] += n
        done = core.CounterMetricFamily(
            "errands_jobs_finished",
            "Jobs that reached a final state, by queue, type and outcome.",
            labels=["queue", "type", "outcome"],
        )
        failed = core.CounterMetricFamily(
            "errands_jobs_failed", "Jobs that failed for good.", labels=["queue", "type"]
        )
        for (queue, jtype, outcome), value in sorted(_bounded(dict(finished)).items()):
            done.add_metric([queue, jtype, outcome], value)
            if outcome == State.FAILED:
                failed.add_metric([queue, jtype], value)
        yield done
        yield failed

        # Wait and run time over the last hour, per queue: a gauge histogram, because it
        # describes a sliding window rather than counting since process start.
        _, per_queue = stats.windows(b.window_rows(now - rollup.HOUR))
        for kind, doc in (
            ("wait", "Wait (due to start of the last attempt) of jobs finished"),
            ("run", "Run time (start to outcome) of attempts ended"),
        ):
            hist = core.GaugeHistogramMetricFamily(
                f"errands_job_{kind}_seconds",
                f"{doc} in the last hour, by queue.",
                labels=["queue"],
            )
            for queue, w in sorted(per_queue.items()):
                measure = w.wait if kind == "wait" else w.run
                cum = rollup.cumulative([measure.hist])
                bounds = [*(repr(float(x)) for x in rollup.BOUNDS), "+Inf"]
                hist.add_metric([queue], list(zip(bounds, cum, strict=True)), measure.total)
            yield hist

        # What only workers see, summed over every worker's registry row.
        seen = b.worker_counters()
        for key, name, doc in (
            (
                "rescued",
                "errands_jobs_rescued",
                "Jobs recovered after a lost lease or dead worker.",
            ),
            ("refused", "errands_fencing_refusals", "Stale outcomes the fence refused."),
            ("db_errors", "errands_database_errors", "Busy timeouts and database errors survived."),
        ):
            yield core.CounterMetricFamily(name, doc, value=seen.get(key, 0))

        due = b.oldest_due(now)
        yield core.GaugeMetricFamily(
            "errands_oldest_due_wait_seconds",
            "How long the oldest due queued job has waited (0 when none).",
            value=0.0 if due is None else due["wait_seconds"],
        )
        yield core.GaugeMetricFamily(
            "errands_jobs_past_lease",
            "Running jobs whose lease has expired (the rescuer should recover them).",
            value=b.running_past_lease(now, 0.0),
        )
        yield core.GaugeMetricFamily(
            "errands_workers_alive",
            "Workers seen within one lease and not stopped.",
            value=len(b.live_workers(now, self.lease_seconds)),
        )
        overdue = core.GaugeMetricFamily(
            "errands_periodic_overdue",
            "1 when a periodic schedule has had no success within its interval plus grace.",
            labels=["name"],
        )
        for p in describe_all(b.list_periodic(), b.live_workers(now, self.lease_seconds), now):
            overdue.add_metric([p["name"]], 1.0 if p["overdue"] else 0.0)
        yield overdue

        yield from _flow(core, b, now)
        yield from _durable(core, b, now)
        yield from _vacuum(core, b, now)

        storage = b.storage()
        yield core.GaugeMetricFamily(
            "errands_database_bytes", "Size of the database.", value=storage["bytes"] or 0
        )
        if storage["wal_bytes"] is not None:
            yield core.GaugeMetricFamily(
                "errands_sqlite_wal_bytes",
                "Size of the SQLite write-ahead log (large: a checkpoint is being held off).",
                value=storage["wal_bytes"],
            )


def _vacuum(core: Any, b: MetricsVerbs, now: float) -> Iterator[Metric]:
    """PostgreSQL's dead tuples per errands table, autovacuum's switch for each, and how old
    the xmin horizon is (errands.horizon; nothing on SQLite, which keeps neither)."""
    tables = b.table_health()
    if not tables:
        return
    dead = core.GaugeMetricFamily(
        "errands_postgres_dead_tuples",
        "Dead tuples VACUUM has yet to reclaim, per errands table.",
        labels=["table"],
    )
    autovacuum = core.GaugeMetricFamily(
        "errands_postgres_autovacuum_enabled",
        "1 when the server's autovacuum runs on the table (server switch and table setting).",
        labels=["table"],
    )
    for t in tables:
        dead.add_metric([t.name], t.dead_tuples)
        autovacuum.add_metric([t.name], 1.0 if t.autovacuum_on else 0.0)
    yield dead
    yield autovacuum
    holders = b.horizon_holders()
    ages = [a for a in (h.age(now) for h in holders) if a is not None]
    yield core.GaugeMetricFamily(
        "errands_postgres_xmin_horizon_age_seconds",
        "How long the oldest transaction holding this database's xmin horizon has been open "
        "(0: none).",
        value=max(ages, default=0.0),
    )
    yield core.GaugeMetricFamily(
        "errands_postgres_xmin_horizon_xids",
        "How many transactions back the xmin horizon is held (any holder, slots included).",
        value=max((h.xid_age for h in holders), default=0),
    )


def _durable(core: Any, b: MetricsVerbs, now: float) -> Iterator[Metric]:
    """Jobs parked by durable steps (docs/durable-steps.md): sleeping, waiting for a signal,
    and waits a minute past their timeout that nothing answered."""
    counts = b.durable_counts(now, WAIT_GRACE)
    parked = core.GaugeMetricFamily(
        "errands_jobs_durable",
        "Jobs sleeping (ctx.sleep), waiting for a signal (ctx.wait_for), or past its timeout.",
        labels=["state"],
    )
    for state, n in sorted(counts.items()):
        parked.add_metric([state], float(n))
    yield parked


def _flow(core: Any, b: MetricsVerbs, now: float) -> Iterator[Metric]:
    """Paused queues and limits (docs/flow-control.md)."""
    paused = core.GaugeMetricFamily(
        "errands_queue_paused", "1 when a queue is paused ('*': every queue).", labels=["queue"]
    )
    paused_for = core.GaugeMetricFamily(
        "errands_queue_paused_seconds", "How long a queue has been paused.", labels=["queue"]
    )
    for queue in limits.queues(b):
        paused.add_metric([queue.name], 1.0 if queue.paused else 0.0)
        if queue.paused_at is not None:
            paused_for.add_metric([queue.name], max(0.0, now - queue.paused_at))
    yield paused
    yield paused_for
    infos = limits.limits(b)
    cap = core.GaugeMetricFamily(
        "errands_limit_max_running", "A limit's running cap (absent: none).", labels=["key"]
    )
    rate = core.GaugeMetricFamily(
        "errands_limit_rate_per_second", "A limit's rate cap, starts per second.", labels=["key"]
    )
    running = core.GaugeMetricFamily(
        "errands_limit_running", "Jobs of a limit key and group running.", labels=["key", "group"]
    )
    waiting = core.GaugeMetricFamily(
        "errands_limit_waiting", "Jobs of a limit key and group queued.", labels=["key", "group"]
    )
    for info in infos:
        if info.running is not None:
            cap.add_metric([info.key], float(info.running))
        if info.rate is not None:
            rate.add_metric([info.key], info.rate[0] / info.rate[1])
        for group, c in info.groups.items():
            running.add_metric([info.key, group], float(c["running"]))
            waiting.add_metric([info.key, group], float(c["waiting"]))
    yield from (cap, rate, running, waiting)


class MetricsSource(Protocol):
    """What ``render_metrics`` reads of a Queue: typed here so the metrics never import it."""

    @property
    def backend(self) -> MetricsVerbs: ...
    @property
    def clock(self) -> Callable[[], float]: ...
    @property
    def settings(self) -> Settings: ...


def render_metrics(q: MetricsSource) -> bytes:
    """The Prometheus text exposition of ``q``'s database, read now."""
    prom = _prometheus()
    registry = prom.CollectorRegistry(auto_describe=False)
    registry.register(ErrandsCollector(q.backend, q.clock, q.settings.lease_seconds))
    data: bytes = prom.generate_latest(registry)
    return data


CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
