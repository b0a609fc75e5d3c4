"""Query and body parameters, checked before any database call: a bad value is a 400 with a
JSON body that names the parameter and what it accepts, never a 500."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ..core import validate
from ..core.states import State
from ..errors import ErrandsError

STATES = tuple(s.value for s in State)
DEFAULT_LIMIT = 50
MAX_LIMIT = 500  # a larger ?limit= is capped to this, not refused
MAX_TEXT = 200  # type, queue and error code filters
MAX_ID = 2**63 - 1  # ids are 64-bit on both backends
WINDOWS = {"1h": 3600.0, "24h": 86400.0, "7d": 604800.0}
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


# The query parameters each JSON read accepts (by route name); any other is refused with 400,
# so a typo (``stauts=failed``) is an error rather than the whole table. A JSON route not named
# here takes none. The pages take the same names as their JSON twins (docs/dashboard.md).
JOB_FILTERS = ("status", "type", "queue", "error_code", "q", "view", "limit", "cursor")
API_QUERY: dict[str, frozenset[str]] = {
    "api_jobs": frozenset(JOB_FILTERS),
    "api_stats": frozenset({"window", "top"}),
    # The failures page's filters (``since``: the older name of ``window``, still taken).
    "api_errors": frozenset({"window", "since", "page", "top"}),
    "api_throughput": frozenset({"hours"}),
    "api_charts": frozenset({"window", "type", "queue"}),  # the overview's charts
    "api_activity": frozenset({"actor", "action", "limit", "cursor"}),  # web/activity.py
}


def unknown_query(route: str, names: Any) -> str | None:
    """The 400 message for query parameters ``route`` does not take, or None."""
    allowed = API_QUERY.get(route, frozenset())
    extra = sorted(set(names) - allowed)
    if not extra:
        return None
    takes = ", ".join(sorted(allowed)) if allowed else "no query parameters"
    return f"unknown query parameter {', '.join(extra)!s:.80}; this endpoint takes {takes}"


class BadParameter(Exception):
    """A parameter the dashboard cannot use: answered with 400."""


def text(params: Mapping[str, Any], name: str) -> str | None:
    """An optional exact-match filter: empty means absent; checked by
    ``validate.filter_text`` like every filter."""
    value = params.get(name)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise BadParameter(f"{name} must be a string")
    if len(value) > MAX_TEXT:
        raise BadParameter(f"{name} is longer than {MAX_TEXT} characters")
    try:  # the filters' one rule (NUL, lone surrogates), answered with 400
        return validate.filter_text(value, name)
    except ErrandsError as exc:
        raise BadParameter(str(exc)) from None


def status(params: Mapping[str, Any], allowed: tuple[str, ...] = STATES) -> str | None:
    value = text(params, "status")
    if value is not None and value not in allowed:
        raise BadParameter(f"status must be one of {', '.join(allowed)}; got {value!r:.40}")
    return value


def integer(
    params: Mapping[str, Any], name: str, *, default: int | None, low: int, high: int
) -> int | None:
    value = params.get(name)
    if value is None or value == "":
        return default
    if isinstance(value, bool):
        raise BadParameter(f"{name} must be a whole number")
    if isinstance(value, int):
        number = value
    elif isinstance(value, str) and re.fullmatch(r"[0-9]{1,19}", value.strip()):
        number = int(value.strip())
    else:
        raise BadParameter(f"{name} must be a whole number from {low} to {high}")
    if not low <= number <= high:
        raise BadParameter(f"{name} must be from {low} to {high}; got {number}")
    return number


def limit(params: Mapping[str, Any]) -> int:
    """``limit``: 1 or more; above MAX_LIMIT it is capped, not refused (a client simply pages)."""
    value = params.get("limit")
    if isinstance(value, str) and re.fullmatch(r"[0-9]{1,19}", value.strip()):
        value = int(value.strip())
    if isinstance(value, int) and not isinstance(value, bool) and value > MAX_LIMIT:
        return MAX_LIMIT
    got = integer(params, "limit", default=DEFAULT_LIMIT, low=1, high=MAX_LIMIT)
    assert got is not None
    return got


def cursor(params: Mapping[str, Any]) -> int | None:
    """The keyset cursor: the id the next page starts below (``next_cursor`` of a page)."""
    return integer(params, "cursor", default=None, low=1, high=MAX_ID)


def job_id(value: Any) -> int | None:
    """A job id from the path: None (→ 404) when it cannot name a job."""
    return value if isinstance(value, int) and 0 < value <= MAX_ID else None


def window(params: Mapping[str, Any], name: str = "window", default: str = "24h") -> float:
    """``1h``, ``24h``, ``7d`` — or any ``<number>[smhdw]`` up to 90 days."""
    value = params.get(name)
    if value is None or value == "":
        value = default
    if not isinstance(value, str):
        raise BadParameter(f"{name} must be a duration like 1h, 24h or 7d")
    if value in WINDOWS:
        return WINDOWS[value]
    match = re.fullmatch(r"([0-9]{1,7})([smhdw]?)", value)
    if not match:
        raise BadParameter(f"{name} must be a duration like 1h, 24h or 7d; got {value!r:.40}")
    seconds = int(match.group(1)) * _UNITS[match.group(2) or "s"]
    if not 1 <= seconds <= 90 * 86400:
        raise BadParameter(f"{name} must be from 1s to 90d")
    return seconds


def flag(params: Mapping[str, Any], name: str) -> bool:
    value = params.get(name, False)
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("", "0", "false", "no", "1", "true", "yes"):
        return value.lower() in ("1", "true", "yes")
    raise BadParameter(f"{name} must be true or false")
