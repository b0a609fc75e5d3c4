"""Plain-JSON checks for payloads and results: refused before any write, with the path named."""

from __future__ import annotations

import json
import math
from typing import Any

from .errors import PayloadError, PayloadTooLargeError

_HINTS = {
    "datetime": "pass dt.isoformat() or a unix timestamp",
    "date": "pass d.isoformat()",
    "bytes": "pass base64 text, or store the data elsewhere and pass a reference",
    "set": "pass a sorted list",
    "frozenset": "pass a sorted list",
    "tuple": "pass a list (JSON has no tuples and it would come back as a list)",
    "Decimal": "pass a string or a float",
    "UUID": "pass str(uuid)",
}


def _fail(what: str, path: str, value: Any) -> PayloadError:
    kind = type(value).__name__
    hint = _HINTS.get(kind, "pass only dict, list, str, int, float, bool or None")
    return PayloadError(f"{what}{path} is a {kind}, which is not plain JSON; {hint}")


def _check(value: Any, what: str, path: str) -> None:
    # Exact type checks: JSON would silently turn tuples into lists and int keys into strings,
    # so a job would not get back what was enqueued.
    t = type(value)
    if value is None or t is str or t is bool or t is int:
        return
    if t is float:
        if not math.isfinite(value):
            raise PayloadError(f"{what}{path} is {value!r}; JSON has no NaN or Infinity")
        return
    if t is dict:
        for key, item in value.items():
            if type(key) is not str:
                raise PayloadError(
                    f"{what}{path} has the key {key!r} ({type(key).__name__}); "
                    "JSON object keys must be strings"
                )
            _check(item, what, f"{path}[{key!r}]")
        return
    if t is list:
        for i, item in enumerate(value):
            _check(item, what, f"{path}[{i}]")
        return
    raise _fail(what, path, value)


# Built once: json.dumps with non-default options builds a new encoder on every call, which
# was a tenth of enqueue_many's time per job.
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def encode(value: Any, *, what: str = "payload", max_bytes: int | None = None) -> str:
    """Return compact JSON text for ``value`` or raise ``PayloadError`` naming the bad part."""
    _check(value, what, "")
    text = _ENCODER.encode(value)
    if max_bytes is not None:
        size = len(text) if text.isascii() else len(text.encode())
        if size > max_bytes:
            raise PayloadTooLargeError(
                f"{what} is {size} bytes, over the {max_bytes}-byte limit (max_payload_bytes); "
                "store large data elsewhere and pass a reference, or raise the limit"
            )
    return text


def decode(text: str | None) -> Any:
    return None if text is None else json.loads(text)
