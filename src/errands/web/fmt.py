"""How the pages show times: one format everywhere, with its zone (``2026-03-01 14:03:12 UTC``),
and beside it the age an operator thinks in (``3 min ago``, ``in 5 min``).

Values arrive as datetimes (jobs, attempts, events), ISO strings (the stats and worker rows) or
epoch seconds; all are shown in UTC, the zone errands stores.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

FORMAT = "%Y-%m-%d %H:%M:%S UTC"
# An ISO 8601 time inside a sentence (a schedule's overdue reason is written once, for the CLI
# and the JSON too, with ISO times): the pages show it in FORMAT like every other time.
ISO_IN_TEXT = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2})?")


@dataclass(frozen=True, slots=True)
class Moment:
    iso: str  # machine-readable, for <time datetime=…>
    text: str  # FORMAT
    ago: str  # relative to the page's now


def to_datetime(value: Any) -> datetime | None:
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        dt = value
    elif isinstance(value, int | float) and not isinstance(value, bool):
        dt = datetime.fromtimestamp(float(value), UTC)
    elif isinstance(value, str):
        try:
            dt = datetime.fromisoformat(value)
        except ValueError:
            return None
    else:
        return None
    return dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt.astimezone(UTC)


def span(seconds: float) -> str:
    """A duration in the largest unit that keeps it readable: 45 s, 3 min, 2 h 5 min, 3 d."""
    s = abs(seconds)
    if s < 60:
        return f"{int(s)} s"
    if s < 3600:
        return f"{int(s // 60)} min"
    if s < 86400:
        hours, minutes = int(s // 3600), int(s % 3600 // 60)
        return f"{hours} h {minutes} min" if minutes and hours < 10 else f"{hours} h"
    days, hours = int(s // 86400), int(s % 86400 // 3600)
    return f"{days} d {hours} h" if hours and days < 10 else f"{days} d"


def duration(seconds: float) -> str:
    """A measured duration: under a second in ms (``25 ms``, ``0.4 ms``), under ten seconds
    with a tenth (``2.5 s``), above that as ``span``."""
    s = abs(seconds)
    if s < 1:
        ms = seconds * 1000
        return f"{ms:.1f} ms" if s < 0.01 else f"{ms:.0f} ms"
    if s < 10:
        return f"{seconds:.1f} s"
    if s < 60:
        return f"{seconds:g} s" if seconds == int(seconds) else f"{seconds:.0f} s"
    return span(seconds)


def relative(dt: datetime, now: datetime) -> str:
    delta = (dt - now).total_seconds()
    if abs(delta) < 1:
        return "just now"
    return f"in {span(delta)}" if delta > 0 else f"{span(delta)} ago"


def moment(value: Any, now: datetime) -> Moment | None:
    dt = to_datetime(value)
    if dt is None:
        return None
    return Moment(
        iso=dt.isoformat(timespec="seconds"), text=dt.strftime(FORMAT), ago=relative(dt, now)
    )


def times_in(text: Any) -> str:
    """``text`` with each ISO 8601 time in it rewritten in the pages' one format."""

    def one(match: re.Match[str]) -> str:
        dt = to_datetime(match.group(0).replace("Z", "+00:00"))
        return match.group(0) if dt is None else dt.strftime(FORMAT)

    return ISO_IN_TEXT.sub(one, "" if text is None else str(text))


def error_parts(code: str | None) -> tuple[str, str]:
    """An error code split after its category (``INTERNAL:`` + ``ValueError``), so a narrow
    column wraps it there and never inside a word."""
    if not code:
        return "", ""
    head, sep, tail = code.partition(":")
    return (head + sep, tail) if sep else (code, "")


def name_parts(name: Any) -> list[str]:
    """A type, queue or worker id cut after each ``_``, ``.``, ``-``, ``/`` or ``:``, where a
    narrow column may wrap it (the template puts a <wbr> between the parts, each escaped)."""
    parts: list[str] = []
    current = ""
    for ch in "" if name is None else str(name):
        current += ch
        if ch in "_.-/:" and len(current) > 1:
            parts.append(current)
            current = ""
    if current:
        parts.append(current)
    return parts
