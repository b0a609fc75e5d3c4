"""Queue settings, each with a documented default, validated once at construction."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta

from ..errors import ConfigurationError
from . import validate
from .states import DEFAULT_AUDIT, Event

Duration = float | int | timedelta

DAY = 86400.0


def seconds(value: Duration, name: str, *, allow_zero: bool = False) -> float:
    """Accept float seconds or a timedelta; refuse negatives (and zero unless allowed),
    NaN, infinity, strings and anything over 1000 years (see errands.core.validate)."""
    return validate.duration(value, name, allow_zero=allow_zero)


# SQLite's busy timeout is a 32-bit count of milliseconds.
MAX_BUSY_TIMEOUT = (2**31 - 1) // 1000


@dataclass(frozen=True, slots=True)
class Retention:
    """How long finished jobs are kept, per terminal state, and the operator activity log
    (``activity``), in seconds."""

    succeeded: float = 30 * DAY
    failed: float = 90 * DAY
    cancelled: float = 30 * DAY
    activity: float = 365 * DAY

    @classmethod
    def of(cls, value: Retention | Mapping[str, Duration] | None) -> Retention:
        if value is None:
            return cls()
        if isinstance(value, Retention):
            return value
        if not isinstance(value, Mapping):
            raise ConfigurationError(
                f"retention must be a mapping such as {{'succeeded': timedelta(days=7)}}, "
                f"got {value!r:.60}"
            )
        unknown = set(value) - {"succeeded", "failed", "cancelled", "activity"}
        if unknown:
            raise ConfigurationError(
                f"retention has unknown state(s) {sorted(unknown)}; "
                "use succeeded, failed, cancelled and/or activity"
            )
        return cls(**{k: seconds(v, f"retention[{k!r}]") for k, v in value.items()})


@dataclass(frozen=True, slots=True)
class Settings:
    durability: str = "full"  # "full": synchronous=FULL; "normal": synchronous=NORMAL
    lease_seconds: float = 60.0
    heartbeat_seconds: float = 15.0
    poll_interval: float = 1.0
    shutdown_timeout: float = 30.0
    busy_timeout: float = 5.0
    max_payload_bytes: int = 1024 * 1024
    max_result_bytes: int = 1024 * 1024
    retention: Retention = field(default_factory=Retention)
    audit: frozenset[Event] = DEFAULT_AUDIT
    allow_network_filesystem: bool = False

    @classmethod
    def build(
        cls,
        *,
        durability: str = "full",
        lease_seconds: Duration = 60.0,
        heartbeat_seconds: Duration | None = None,
        poll_interval: Duration = 1.0,
        shutdown_timeout: Duration = 30.0,
        busy_timeout: Duration = 5.0,
        max_payload_bytes: int = 1024 * 1024,
        max_result_bytes: int = 1024 * 1024,
        retention: Retention | Mapping[str, Duration] | None = None,
        audit: Iterable[Event | str] | None = None,
        allow_network_filesystem: bool = False,
    ) -> Settings:
        if not isinstance(durability, str) or durability not in ("full", "normal"):
            raise ConfigurationError(
                f"durability must be 'full' (survives power loss) or 'normal' "
                f"(survives an app crash), got {durability!r}"
            )
        lease = seconds(lease_seconds, "lease_seconds")
        # Three beats per lease: one lost beat never loses a healthy job.
        beat = (
            lease / 4
            if heartbeat_seconds is None
            else seconds(heartbeat_seconds, "heartbeat_seconds")
        )
        if beat >= lease:
            raise ConfigurationError(
                f"heartbeat_seconds ({beat}) must be shorter than lease_seconds ({lease}), "
                "or every lease would expire before it is renewed"
            )
        validate.integer(max_payload_bytes, "max_payload_bytes", 1, validate.INT32_MAX)
        validate.integer(max_result_bytes, "max_result_bytes", 1, validate.INT32_MAX)
        if isinstance(audit, str):
            raise ConfigurationError(
                f"audit must be a collection of event names, e.g. ['ENQUEUED', 'FAILED'], "
                f"got the string {audit!r:.60}"
            )
        try:
            events = DEFAULT_AUDIT if audit is None else frozenset(_event(e) for e in audit)
        except TypeError:
            raise ConfigurationError(
                f"audit must be a collection of event names, got {audit!r:.60}"
            ) from None
        return cls(
            durability=durability,
            lease_seconds=lease,
            heartbeat_seconds=beat,
            poll_interval=seconds(poll_interval, "poll_interval"),
            shutdown_timeout=seconds(shutdown_timeout, "shutdown_timeout", allow_zero=True),
            busy_timeout=validate.duration(busy_timeout, "busy_timeout", maximum=MAX_BUSY_TIMEOUT),
            max_payload_bytes=max_payload_bytes,
            max_result_bytes=max_result_bytes,
            retention=Retention.of(retention),
            audit=events,
            allow_network_filesystem=validate.flag(
                allow_network_filesystem, "allow_network_filesystem"
            ),
        )


def _event(value: Event | str) -> Event:
    try:
        return Event(value)
    except ValueError:
        raise ConfigurationError(
            f"audit names unknown event {value!r}; choose from {', '.join(e.value for e in Event)}"
        ) from None
