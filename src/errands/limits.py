"""Flow control, the application's side (docs/flow-control.md): ``Limit`` for
``@q.task(limit=…)``, and what ``Queue.pause/resume/queues/set_limit/clear_limit/limits``
read and write.

The promises live in the claim (backends/flow.py); this module shapes input and output:
a limit checked when it is declared, a job's key and group worked out at enqueue, pauses and
limits read back as ``QueueInfo`` and ``LimitInfo``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from .backends.base import LimitSpec
from .core import validate
from .errors import ConfigurationError

Group = str | Callable[[Mapping[str, Any]], Any] | None
# Every cap a limit holds — running, a rate's count, a rate's period in seconds — is at most
# this: each fits both backends' columns (PostgreSQL's integer), and a rate window's starts
# stay a table the claim counts quickly (docs/flow-control.md).
MAX_CAP = 1_000_000


@dataclass(frozen=True, slots=True)
class Limit:
    """At most ``running`` jobs of ``key`` holding a lease at once, and at most ``rate[0]``
    attempt starts in any ``rate[1]`` seconds, across every worker — per group when ``group``
    names a payload field (or is a callable of the payload). Several tasks may share a key."""

    key: str
    running: int | None = None
    rate: tuple[int, float] | None = None
    group: Group = None

    def __post_init__(self) -> None:
        validate.text(self.key, "limit key", max_bytes=validate.MAX_KEY_BYTES)
        if self.running is None and self.rate is None:
            raise ConfigurationError(
                f"Limit({self.key!r}) caps nothing: give running=N, rate=(n, seconds) or both"
            )
        if self.running is not None:
            validate.integer(self.running, "Limit running", 0, MAX_CAP)
        if self.rate is not None:
            check_rate(self.rate)
        if self.group is not None and not (isinstance(self.group, str) or callable(self.group)):
            raise ConfigurationError(
                "Limit group must be a payload field name or a callable of the payload, "
                f"got {type(self.group).__name__}"
            )

    def spec(self) -> LimitSpec:
        """The limit as the backends store it (rate as whole starts per period)."""
        rate = self.rate
        return LimitSpec(
            self.key,
            self.running,
            None if rate is None else int(rate[0]),
            None if rate is None else float(rate[1]),
        )

    def group_of(self, payload: Any) -> str:
        """This payload's group: '' without a group (or when the field is missing: those
        jobs share one group); a value that is not text is its JSON text (42 -> '42'). It
        gets the text rule names get, at most 1024 bytes (ConfigurationError)."""
        group = self.group
        if group is None:
            return ""
        if isinstance(group, str):
            value = payload.get(group) if isinstance(payload, Mapping) else None
        else:
            value = group(payload)
        if value is None:
            return ""
        text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
        return validate.group(text, self.key)


def check_rate(rate: Any) -> tuple[int, float]:
    if (
        not isinstance(rate, tuple | list)
        or len(rate) != 2
        or isinstance(rate[0], bool)
        or not isinstance(rate[0], int)
        or not 1 <= rate[0] <= MAX_CAP
        or isinstance(rate[1], bool)
        or not isinstance(rate[1], int | float)
        or not 0 < rate[1] <= MAX_CAP  # also refuses NaN and infinity
    ):
        raise ConfigurationError(
            f"rate must be (n, seconds) with n from 1 to {MAX_CAP:,} and seconds over 0 and "
            f"at most {MAX_CAP:,}, got {rate!r:.60}"
        )
    return int(rate[0]), float(rate[1])


def parse_rate(text: str) -> tuple[int, float]:
    """``N/SECONDS`` (the CLI's ``--rate 100/60``) as (n, seconds)."""
    n, sep, secs = text.partition("/")
    try:
        rate = (int(n), float(secs)) if sep else None
    except ValueError:
        rate = None
    if rate is None:
        raise ConfigurationError(f"--rate must be N/SECONDS (e.g. 100/60), got {text!r:.40}")
    return check_rate(rate)


@dataclass(frozen=True, slots=True)
class QueueInfo:
    """A queue as ``q.queues()`` shows it: whether it is paused, by whom, since when, why,
    and its active jobs per state."""

    name: str
    paused: bool
    paused_at: float | None = None
    paused_by: str | None = None
    reason: str | None = None
    counts: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """As JSON, for ``errands queues --json`` and the admin API."""
        return {
            "name": self.name,
            "paused": self.paused,
            "paused_at": self.paused_at,
            "paused_by": self.paused_by,
            "reason": self.reason,
            "counts": dict(self.counts),
        }


@dataclass(frozen=True, slots=True)
class LimitInfo:
    """A limit as ``q.limits()`` shows it: the caps in force (``source``: ``"set"`` by an
    operator, else ``"code"``), and per group the jobs running now and waiting."""

    key: str
    running: int | None
    rate: tuple[int, float] | None
    source: str
    code_running: int | None = None
    code_rate: tuple[int, float] | None = None
    set_at: float | None = None
    set_by: str | None = None
    groups: dict[str, dict[str, int]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """As JSON, for ``errands limits --json`` and the admin API."""
        return {
            "key": self.key,
            "running": self.running,
            "rate": None if self.rate is None else list(self.rate),
            "source": self.source,
            "code_running": self.code_running,
            "code_rate": None if self.code_rate is None else list(self.code_rate),
            "set_at": self.set_at,
            "set_by": self.set_by,
            "groups": {g: dict(c) for g, c in self.groups.items()},
        }


class FlowReads(Protocol):
    """The flow verbs the reports read (the metrics collector passes its own slice)."""

    def paused_queues(self) -> list[dict[str, Any]]: ...
    def active_queue_counts(self) -> list[dict[str, Any]]: ...
    def limit_caps(self) -> list[dict[str, Any]]: ...
    def limit_usage(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]: ...


def queues(backend: FlowReads) -> list[QueueInfo]:
    """Every queue that has active jobs or a pause ('*' shows as a queue of its own)."""
    pauses = {r["queue"]: r for r in backend.paused_queues()}
    counts: dict[str, dict[str, int]] = {}
    for r in backend.active_queue_counts():
        counts.setdefault(r["queue"], {"queued": 0, "running": 0})[r["status"]] = int(r["n"])
    every = pauses.get("*")
    out = []
    for name in sorted(set(pauses) | set(counts)):
        p = pauses.get(name) or (every if name != "*" else None)
        out.append(
            QueueInfo(
                name,
                p is not None,
                None if p is None else p["paused_at"],
                None if p is None else p["paused_by"],
                None if p is None else p["reason"],
                counts.get(name, {"queued": 0, "running": 0}),
            )
        )
    return out


class QueueUsers(Protocol):
    """What tells a queue in use from a typo: declared task types, active jobs, workers."""

    def active_queue_counts(self) -> list[dict[str, Any]]: ...
    def task_types(self) -> Sequence[Any]: ...
    def live_workers(self, now: float, alive_seconds: float) -> list[dict[str, Any]]: ...


def unused_queues(
    backend: QueueUsers,
    names: Sequence[str],
    task_queues: Iterable[str],
    now: float,
    alive_seconds: float,
) -> list[str]:
    """Those of ``names`` that no task (``task_queues``, and every type a worker declared),
    no queued or running job and no live worker uses: most likely misspelled. A pause or a
    worker on such a queue is allowed (jobs may come later) but binds nothing today."""
    used = set(task_queues) | {t.queue for t in backend.task_types()}
    used |= {r["queue"] for r in backend.active_queue_counts()}
    for w in backend.live_workers(now, alive_seconds):
        used |= set(w["queues"] or ())
    return [n for n in names if n != "*" and n not in used]


def unused_queue_warning(names: Sequence[str]) -> str:
    return (
        f"warning: no task, job or worker uses queue {', '.join(map(repr, names))}: is it "
        "misspelled? (`errands queues` lists the queues with jobs)"
    )


def limits(backend: FlowReads) -> list[LimitInfo]:
    running, queued = backend.limit_usage()
    groups: dict[str, dict[str, dict[str, int]]] = {}
    for rows, what in ((running, "running"), (queued, "waiting")):
        for r in rows:
            g = groups.setdefault(r["limit_key"], {}).setdefault(
                r["limit_group"], {"running": 0, "waiting": 0}
            )
            g[what] = int(r["n"])
    out = []
    caps = {r["key"]: r for r in backend.limit_caps()}
    for key in sorted(set(caps) | set(groups)):
        c = caps.get(key)
        if c is None:  # jobs carry a key no worker has declared yet: no cap known
            out.append(LimitInfo(key, None, None, "none", groups=groups.get(key, {})))
            continue
        out.append(
            LimitInfo(
                key,
                c["running"],
                _rate(c["rate_count"], c["rate_seconds"]),
                "code" if c["set_at"] is None else "set",
                c["code_running"],
                _rate(c["code_rate_count"], c["code_rate_seconds"]),
                c["set_at"],
                c["set_by"],
                groups.get(key, {}),
            )
        )
    return out


def _rate(n: Any, seconds: Any) -> tuple[int, float] | None:
    return None if n is None or seconds is None else (int(n), float(seconds))


def limit_specs(limits_: Sequence[Limit | None]) -> list[LimitSpec]:
    """The code's limits, one per key (tasks sharing a key must agree)."""
    by_key: dict[str, Limit] = {}
    for lim in limits_:
        if lim is None:
            continue
        seen = by_key.setdefault(lim.key, lim)
        if (seen.running, seen.rate) != (lim.running, lim.rate):
            raise ConfigurationError(
                f"tasks share limit key {lim.key!r} with different caps "
                f"(running={seen.running}, rate={seen.rate} vs running={lim.running}, "
                f"rate={lim.rate}); declare one Limit object and reuse it"
            )
    return [lim.spec() for lim in by_key.values()]
