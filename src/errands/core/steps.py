"""The durable calls' vocabulary (docs/durable-steps.md): the names and durations a
handler gives ``ctx.step``, ``ctx.sleep`` and ``ctx.wait_for``, checked before anything is
written."""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from . import payload as payload_json
from .records import to_epoch

NAME_LIMIT = 200
# A wait this far past its timeout was missed: the rescuer's pass (every lease/2, at most
# 5 s) answers it well before (stats, metrics and errands check report it).
WAIT_GRACE = 60.0


def seconds_of(value: float | timedelta, what: str) -> float:
    """A duration as float seconds, refused unless finite and >= 0."""
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(
            f"{what} takes seconds (a finite number) or a timedelta, got {value!r:.40}"
        )
    if value < 0:
        raise ValueError(f"{what} takes seconds >= 0, got {value!r:.40}")
    return float(value)


def check_name(name: object, what: str) -> str:
    if not isinstance(name, str) or not name:
        raise ValueError(f"{what} needs a name (non-empty text), got {name!r:.40}")
    if len(name) > NAME_LIMIT:
        raise ValueError(f"{what} name is {len(name)} characters; keep it to {NAME_LIMIT}")
    if payload_json.storable_text(name) != name:
        raise ValueError(
            f"{what} name {name!r:.60} holds a NUL or a lone surrogate, which no database "
            "stores; use plain text"
        )
    return name


def wake_time(when: datetime) -> float:
    if not isinstance(when, datetime) or when.tzinfo is None:
        raise ValueError(
            f"ctx.sleep_until takes an aware datetime (with a tzinfo), got {when!r:.60}"
        )
    epoch = to_epoch(when)
    assert epoch is not None
    return epoch
