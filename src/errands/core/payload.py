"""Plain-JSON checks for payloads and results: refused before any write, with the path named.

One canonical rule, the same on every backend, so that whatever SQLite accepts also fits
PostgreSQL's jsonb (and graduates): exact JSON types; finite floats; integers in the signed
64-bit range (SQLite's JSON functions read larger ones as floating point); at most
``MAX_DEPTH`` levels of nesting; no NUL character and no lone surrogate in any string or key
(jsonb refuses ``\\u0000``, and neither backend can store a surrogate as UTF-8). The text is
compact JSON with ``ensure_ascii=False``; its UTF-8 encoding (one pass, which also catches
surrogates) is what ``max_payload_bytes`` / ``max_result_bytes`` measure.

The same module makes free text (error messages, tracebacks) storable: NUL and lone
surrogates become U+FFFD, and the text is cut to a limit.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from itertools import chain, compress, repeat
from typing import Any

from ..errors import PayloadError, PayloadTooLargeError

MAX_DEPTH = 100  # levels of nested arrays/objects
INT_MIN, INT_MAX = -(2**63), 2**63 - 1

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
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def _fail(what: str, path: str, value: Any) -> PayloadError:
    kind = type(value).__name__
    hint = _HINTS.get(kind, "pass only dict, list, str, int, float, bool or None")
    return PayloadError(f"{what}{path} is a {kind}, which is not plain JSON; {hint}")


def _plain_scalar(value: Any) -> bool:
    """A value ``_check`` accepts without looking further (the common case, kept cheap)."""
    t = type(value)
    return (
        t is str
        or value is None
        or t is bool
        or (t is int and INT_MIN <= value <= INT_MAX)
        or (t is float and math.isfinite(value))
    )


def _check(value: Any, what: str, path: str, depth: int) -> None:
    # Exact type checks: JSON would silently turn tuples into lists and int keys into strings,
    # so a job would not get back what was enqueued.
    t = type(value)
    if value is None or t is str or t is bool:
        return
    if t is int:
        if INT_MIN <= value <= INT_MAX:
            return
        # Never str(value): a huge int cannot even be printed (int max str digits).
        raise PayloadError(
            f"{what}{path} is an integer of {value.bit_length()} bits, outside the signed "
            "64-bit range every backend stores exactly; pass it as a string"
        )
    if t is float:
        if not math.isfinite(value):
            raise PayloadError(f"{what}{path} is {value!r}; JSON has no NaN or Infinity")
        return
    if t is dict or t is list:
        if depth >= MAX_DEPTH:
            where = path if len(path) <= 60 else path[:60] + "…"
            raise PayloadError(
                f"{what}{where} is nested deeper than {MAX_DEPTH} levels; flatten it, or pass "
                "the deep part as a JSON string"
            )
        # Plain scalars are passed here, inline: the recursive call (and the path text it
        # needs, built only for it) is for containers and for values that fail.
        if t is dict:
            for key, item in value.items():
                if type(key) is not str:
                    raise PayloadError(
                        f"{what}{path} has the key {key!r} ({type(key).__name__}); "
                        "JSON object keys must be strings"
                    )
                if not _plain_scalar(item):
                    _check(item, what, f"{path}[{key!r}]", depth + 1)
        else:
            for i, item in enumerate(value):
                if not _plain_scalar(item):
                    _check(item, what, f"{path}[{i}]", depth + 1)
        return
    raise _fail(what, path, value)


def _unstorable(
    text: str, where: str, remedy: str = "remove it, or pass binary data as base64"
) -> PayloadError | None:
    found = _UNSTORABLE.search(text)
    if found is None:
        return None
    char = found.group()
    kind = "a NUL character" if char == "\x00" else f"a lone surrogate ({char!r})"
    return PayloadError(
        f"{where} holds {kind} at index {found.start()}, which no backend stores as text; {remedy}"
    )


def unstorable_text(text: str, where: str) -> PayloadError | None:
    """The payload rule's error for one string (a filter, say) holding a NUL character or a
    lone surrogate, or None if every backend can store it."""
    if _UNSTORABLE.search(text) is None:
        return None
    return _unstorable(text, where, remedy="pass valid UTF-8 text without NUL characters")


def _bad_text(value: Any, what: str, path: str) -> PayloadError | None:
    """The first string or key holding a NUL or a lone surrogate, as an error naming it.
    Only called once the fast checks in ``encode`` saw a hint of one."""
    if type(value) is str:
        return _unstorable(value, f"{what}{path}")
    if type(value) is dict:
        for key, item in value.items():
            error = _unstorable(key, f"a key of {what}{path}") or _bad_text(
                item, what, f"{path}[{key!r}]"
            )
            if error is not None:
                return error
    elif type(value) is list:
        for i, item in enumerate(value):
            error = _bad_text(item, what, f"{path}[{i}]")
            if error is not None:
                return error
    return None


def unstorable_text_in(value: Any, what: str) -> PayloadError | None:
    """The first NUL character or lone surrogate in the strings and keys of a decoded JSON
    value, as an error naming its path (``errands graduate`` checks old rows with it)."""
    return _bad_text(value, what, "")


# Built once: json.dumps with non-default options builds a new encoder on every call, which
# was a tenth of enqueue_many's time per job.
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _compact_encoder() -> tuple[Callable[[Any], str], Callable[[list[Any]], list[str]]]:
    """``_ENCODER.encode`` without its per-call set-up: ``JSONEncoder.encode`` builds a new C
    encoder on every call (half its time for a small payload). This one is built once, with
    no cycle check: ``_check`` has already refused anything nested deeper than MAX_DEPTH,
    which a cycle would be. Falls back to ``_ENCODER.encode`` where the C encoder is missing
    or takes other arguments (it is CPython's private ``_json``). The second function encodes
    a list of values, one text each, with no Python call per value."""
    plain = _ENCODER.encode, lambda values: list(map(_ENCODER.encode, values))
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return plain
    try:
        encode_chunks = make(
            None,
            _ENCODER.default,
            json.encoder.encode_basestring,
            None,
            ":",
            ",",
            False,
            False,
            False,
        )
        sample = {"a": [1, 2.5, None, True, "é\u2028"], "b": {}}
        if "".join(encode_chunks(sample, 0)) != _ENCODER.encode(sample):
            return plain
    except Exception:
        return plain
    join = "".join
    return (
        lambda value: join(encode_chunks(value, 0)),
        lambda values: list(map(join, map(encode_chunks, values, repeat(0)))),
    )


_encode_compact, _encode_all = _compact_encoder()


def check(value: Any, what: str = "payload") -> None:
    """Raise ``PayloadError`` naming the first part of ``value`` that is not plain JSON (the
    first half of ``encode``; ``encode_checked`` is the second, for many values at once)."""
    _check(value, what, "", 0)


_FLAT_VALUE_TYPES = frozenset({str, int, float, bool, type(None)})
_is_int = int.__instancecheck__  # bools too: in range


def _flat(values: list[Any]) -> bool:
    """Whether every value is a dict whose keys are strings and whose values are plain
    scalars of exact types with integers in the signed 64-bit range (the common payload,
    ``{"user_id": 7}``), read in C: no Python step per value. Float finiteness is left to
    the encoder (it refuses NaN and Infinity)."""
    if set(map(type, values)) != {dict}:
        return False
    if not set(map(type, chain.from_iterable(values))) <= {str}:
        return False
    scalars = list(chain.from_iterable(map(dict.values, values)))
    if not set(map(type, scalars)) <= _FLAT_VALUE_TYPES:
        return False
    ints = list(compress(scalars, map(_is_int, scalars)))
    return not ints or (INT_MIN <= min(ints) and max(ints) <= INT_MAX)


def encode_checked(values: list[Any], max_bytes: int | None) -> list[str] | None:
    """The compact JSON text of each of ``values``, or None when one of them may break the
    rule and the caller must ``check`` and ``encode`` them one by one to name it.

    ``enqueue_many``'s bulk of flat payloads pays per payload only the C encoder: the type
    and range check (``_flat``), finiteness (the encoder refuses NaN and Infinity), the
    UTF-8 encoding (which catches surrogates), the NUL scan and the size check run once
    over all of them. When the total fits ``max_bytes``, each payload does; else a payload
    of ``k`` characters is at most ``4k`` bytes (UTF-8, no surrogates), so the longest text
    bounds them all; past that, each is measured by ``encode``."""
    if not _flat(values):
        return None
    try:
        texts = _encode_all(values)
    except ValueError:  # NaN or Infinity
        return None
    whole = "".join(texts)
    try:
        size = len(whole.encode())
    except UnicodeEncodeError:
        return None
    if "\\u0000" in whole:
        return None
    if max_bytes is not None and size > max_bytes and max(map(len, texts)) * 4 > max_bytes:
        return None
    return texts


def encode(
    value: Any,
    *,
    what: str = "payload",
    max_bytes: int | None = None,
    setting: str = "max_payload_bytes",
) -> str:
    """Return compact JSON text for ``value`` or raise ``PayloadError`` naming the bad part."""
    _check(value, what, "", 0)
    text = _encode_compact(value)
    # Fast checks for the common case: one encode (fails on any surrogate) and one scan
    # (json.dumps writes NUL as \u0000). Only on a hint is the value walked to name the path;
    # the scan can also hit an innocent literal backslash-u0000, which the walk clears.
    try:
        data = text.encode()
    except UnicodeEncodeError:
        error = _bad_text(value, what, "") or PayloadError(f"{what} is not valid Unicode")
        raise error from None
    if "\\u0000" in text:
        nul = _bad_text(value, what, "")
        if nul is not None:
            raise nul
    if max_bytes is not None:
        size = len(data)
        if size > max_bytes:
            raise PayloadTooLargeError(
                f"{what} is {size} bytes, over the {max_bytes}-byte limit ({setting}); "
                "store large data elsewhere and pass a reference, or raise the limit"
            )
    return text


def decode(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def storable_text(text: str, limit: int | None = None) -> str:
    """Free text (an error message, a traceback) as every backend can store it: NUL and lone
    surrogates replaced with U+FFFD, cut to ``limit`` characters (ending in an ellipsis).
    Costs one scan for ordinary text."""
    if _UNSTORABLE.search(text) is not None:
        text = _UNSTORABLE.sub("\ufffd", text)
    if limit is not None and len(text) > limit:
        text = text[: limit - 1] + "…"
    return text
