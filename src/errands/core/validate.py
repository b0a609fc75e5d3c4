"""Range and type checks for everything a caller passes in, done before anything is written.

Both backends must store every value errands accepts, and every stored value must read back:
integers fit PostgreSQL's ``integer``/``bigint`` columns, times stay within the years Python's
``datetime`` can represent (1-9999), durations are finite. Each check raises
``ConfigurationError`` (an ``ErrandsError`` and a ``ValueError``) naming the argument, what it
got and what it takes, on one line. They are cheap: they run once per ``enqueue`` call, never
on the worker's claim/finish path.
"""

from __future__ import annotations

import difflib
import inspect
import math
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from ..errors import MAX_DURATION as MAX_DURATION
from ..errors import ConfigurationError
from . import payload as payload_json

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MAX = 2**63 - 1
# priority is an ``integer`` column on PostgreSQL; max_attempts too, with room for manual retries.
PRIORITY_RANGE = (INT32_MIN, INT32_MAX)
MAX_ATTEMPTS_MAX = 1_000_000
# Stored times must read back as datetimes: 0001-01-01 to 9999-12-31T23:59:59 UTC.
MIN_EPOCH = datetime(1, 1, 1, tzinfo=UTC).timestamp()
MAX_EPOCH = datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC).timestamp()
# Any duration: MAX_DURATION (errors.py, which Snooze shares), 1000 years.
MAX_NAME_BYTES = 255  # task types, queue names
MAX_KEY_BYTES = 1024  # unique_key: PostgreSQL's btree index takes about 2.7 kB at most
# A limit group shares an index entry with its key (jobs_limited_due): key and group together
# stay under PostgreSQL's 2.7 kB per index row.
MAX_GROUP_BYTES = 1024


def integer(value: Any, name: str, lo: int, hi: int) -> int:
    """An int (not a bool, not a float or a string) within [lo, hi]."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConfigurationError(
            f"{name} must be a whole number (int) between {lo} and {hi}, got {value!r:.60} "
            f"({type(value).__name__})"
        )
    if not lo <= value <= hi:
        raise ConfigurationError(f"{name} must be between {lo} and {hi}, got {value!r:.60}")
    return int(value)


def job_id(value: Any, name: str = "job id") -> int:
    """A job id: ids are positive 64-bit integers on both backends."""
    return integer(value, name, 1, INT64_MAX)


ON_UPSTREAM_FAILURE = ("cancel", "run")


def after(value: Any, on_upstream_failure: Any = "cancel") -> tuple[int, ...] | None:
    """``after=`` (job ids a job runs after) and ``on_upstream_failure``; None: no
    dependencies (an empty list too: there is nothing to wait for)."""
    if on_upstream_failure not in ON_UPSTREAM_FAILURE:
        raise ConfigurationError(
            f"on_upstream_failure must be 'cancel' or 'run', got {on_upstream_failure!r:.40}"
        )
    if value is None:
        return None
    if type(value) in (list, tuple) and all(
        type(v) is int and 0 < v <= INT64_MAX for v in value
    ):  # the common case, checked without the ABC isinstance calls (enqueue_many's items)
        return tuple(dict.fromkeys(value)) or None
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Iterable):
        raise ConfigurationError(
            f"after= takes a list of job ids (after=[a, b]), got {type(value).__name__}"
        )
    ids = tuple(dict.fromkeys(job_id(v, "after= job id") for v in value))
    return ids or None


def duration(
    value: Any, name: str, *, allow_zero: bool = False, maximum: float = MAX_DURATION
) -> float:
    """Float seconds or a timedelta: finite, > 0 (or >= 0 with allow_zero), at most maximum."""
    if isinstance(value, timedelta):
        s = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        try:
            s = float(value)
        except OverflowError:  # an int too large for a float
            s = math.inf
    else:
        raise ConfigurationError(
            f"{name} must be seconds (int or float) or a timedelta, got {value!r:.60} "
            f"({type(value).__name__})"
        )
    low = s >= 0 if allow_zero else s > 0
    if not (low and s <= maximum):  # also refuses NaN
        need = ">= 0" if allow_zero else "> 0"
        raise ConfigurationError(
            f"{name} must be {need} and at most {maximum:.0f} seconds, got {value!r:.60}"
        )
    return s


def epoch(value: Any, name: str) -> float:
    """An aware datetime or unix seconds, within the years 1-9999 (UTC)."""
    if isinstance(value, datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise ConfigurationError(
                f"{name} {value.isoformat()} is a naive datetime, which is ambiguous; pass an "
                "aware one (e.g. datetime.now(UTC)) so errands knows which moment you mean"
            )
        try:
            s = value.timestamp()
        except (OverflowError, ValueError):
            s = math.inf
    elif isinstance(value, int | float) and not isinstance(value, bool):
        try:
            s = float(value)
        except OverflowError:
            s = math.inf
    else:
        raise ConfigurationError(
            f"{name} must be an aware datetime or unix seconds, got {value!r:.60} "
            f"({type(value).__name__})"
        )
    if not MIN_EPOCH <= s <= MAX_EPOCH:
        raise ConfigurationError(
            f"{name} {value!r:.60} is outside the years 1-9999 that errands can store and "
            "read back; pass a time before 9999-12-31 UTC"
        )
    return s


def when(now: float, delay: Any) -> float:
    """``now + delay`` as a storable time."""
    at = now + duration(delay, "delay", allow_zero=True)
    if at > MAX_EPOCH:
        raise ConfigurationError(
            f"delay {delay!r:.60} puts the job past 9999-12-31 UTC, which cannot be stored; "
            "pass a shorter delay"
        )
    return at


def text(value: Any, name: str, *, max_bytes: int = MAX_NAME_BYTES) -> str:
    """A non-empty string both backends store as given: no NUL characters, no lone
    surrogates (not UTF-8), at most ``max_bytes`` bytes."""
    if not isinstance(value, str) or not value:
        raise ConfigurationError(f"{name} must be a non-empty string, got {value!r:.60}")
    if "\x00" in value:
        raise ConfigurationError(
            f"{name} {value!r:.60} contains a NUL character, which PostgreSQL cannot store"
        )
    try:
        size = len(value.encode())
    except UnicodeEncodeError:
        raise ConfigurationError(
            f"{name} {value!r:.60} contains a lone surrogate, which is not valid UTF-8"
        ) from None
    if size > max_bytes:
        raise ConfigurationError(f"{name} is {size} bytes; at most {max_bytes} are allowed")
    return value


def group(value: str, key: str) -> str:
    """A job's limit group, worked out from its payload: '' (no group), or ``text`` of at
    most ``MAX_GROUP_BYTES`` — a group no backend stores whole would otherwise reach the
    claim (docs/flow-control.md). Checked for every limited job enqueued: the common case
    (short ASCII text) costs two string scans, and the error's name is built only for it."""
    if not value or (value.isascii() and len(value) <= MAX_GROUP_BYTES and "\x00" not in value):
        return value
    return text(value, f"limit {key!r:.60} group", max_bytes=MAX_GROUP_BYTES)


PROGRESS_MESSAGE_CHARS = 200


def progress(fraction: Any, message: Any) -> tuple[float, str | None]:
    """``ctx.progress(fraction, message)``: a number from 0 to 1 (not a percentage, not NaN)
    and None or text every backend stores (no NUL, no lone surrogate), kept to its first 200
    characters. Refused here, in the handler's call: a value written later, by the worker's
    heartbeat, could only fail there (docs/flow-control.md)."""
    if (
        isinstance(fraction, bool)
        or not isinstance(fraction, int | float)
        or not 0.0 <= fraction <= 1.0  # also refuses NaN
    ):
        raise ConfigurationError(
            f"ctx.progress takes a fraction from 0 to 1 (0.4, not 40 per cent), "
            f"got {fraction!r:.40}"
        )
    if message is None:
        return float(fraction), None
    if not isinstance(message, str):
        raise ConfigurationError(
            f"ctx.progress message must be text or None, got {type(message).__name__}"
        )
    if "\x00" in message or not (message.isascii() or _encodes(message)):
        error = payload_json.unstorable_text(message, f"ctx.progress message {message!r:.40}")
        raise ConfigurationError(str(error))
    return float(fraction), message[:PROGRESS_MESSAGE_CHARS]


def _encodes(value: str) -> bool:
    """Whether ``value`` is valid UTF-8 text (no lone surrogate)."""
    try:
        value.encode()
    except UnicodeEncodeError:
        return False
    return True


def name(value: Any, what: str) -> str:
    """A task or queue name: ``text``, and no comma — commas separate names where a list of
    them is one string (``errands worker --queues a,b``, the ``workers`` registry's
    ``queues`` and ``types`` columns), so a name holding one could never be selected or
    reported as handled."""
    text(value, what)
    if "," in value:
        raise ConfigurationError(
            f"{what} {value!r:.60} contains a comma, which errands uses to separate names "
            "(--queues a,b and the workers registry); choose a name without commas"
        )
    return str(value)


def filter_text(value: Any, what: str) -> str | None:
    """A filter on a stored name (a job type, a queue, an error code): None or a string.
    Text no backend can store (a NUL, a lone surrogate — e.g. undecodable bytes from a
    command line) could match no job and makes the database driver raise, so it gets the
    payload rule's error (``PayloadError``), at every entry point that filters: ``q.jobs``,
    the bulk actions, the command line (exit 2) and the dashboard (HTTP 400)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise ConfigurationError(f"{what} must be a string, got {value!r:.60}")
    error = payload_json.unstorable_text(value, f"the {what} filter {value!r:.60}")
    if error is not None:
        raise error
    return value


def unbound_keys(signature: inspect.Signature, keys: Iterable[str]) -> str | None:
    """Why keyword arguments ``keys`` do not bind to ``signature``, naming every missing
    and every unexpected name at once (Python's own TypeError names only the first): a
    misspelt key is both, and the fix needs both names. None when that is not the reason."""
    params = signature.parameters
    named = {n for n, p in params.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    missing = [n for n in named if params[n].default is inspect.Parameter.empty and n not in keys]
    takes_any = any(p.kind is p.VAR_KEYWORD for p in params.values())
    unexpected = [] if takes_any else sorted(k for k in keys if k not in named)
    if not missing and not unexpected:
        return None
    parts = []
    if missing:
        parts.append(f"missing {', '.join(map(repr, missing))}")
    for key in unexpected:
        close = difflib.get_close_matches(key, missing or sorted(named), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        parts.append(f"unexpected {key!r}{hint}")
    return "; ".join(parts)


def flag(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigurationError(f"{name} must be True or False, got {value!r:.60}")
    return value


def exception_types(value: Any, name: str) -> tuple[type[BaseException], ...]:
    """A tuple (or list) of exception classes, as ``except`` takes them."""
    items = (value,) if isinstance(value, type) else value
    try:
        found = tuple(items)
    except TypeError:
        found = (value,)
    for item in found:
        if not (isinstance(item, type) and issubclass(item, BaseException)):
            raise ConfigurationError(
                f"{name} must be exception classes, e.g. (ConnectionError, TimeoutError); "
                f"got {item!r:.60}"
            )
    return found


def callable_(value: Any, name: str, what: str) -> Callable[..., Any]:
    if not callable(value):
        raise ConfigurationError(f"{name} must be {what}, got {value!r:.60}")
    return value  # type: ignore[no-any-return]
