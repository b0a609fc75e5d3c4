"""Text an older errands stored in SQLite that is not UTF-8, and how the worker survives it.

How it arises: a job's rows reach SQLite as one JSON array (``json.dumps`` escapes a lone
surrogate as ``\\udcff``), and SQLite's JSON functions store that escape as the bytes
``ED B3 BF``, which no UTF-8 decoder accepts. Before limit groups got the text rule at
enqueue (docs/flow-control.md), ``Limit(group=…)`` could store such a group; ``sqlite3``
then fails every statement that reads it ("Could not decode to UTF-8 column
'limit_group'") — and the claim reads every due group, so no job at all could start.

The read paths defend themselves: listings decode leniently (``lenient_text``, U+FFFD for a
bad byte), and a claim that fails to decode rewrites each undecodable group as its lenient
text (a blob read that cannot fail, then one update per bad group), then claims again. Two
bad groups that decode alike become one group: that holds their jobs to one cap, never
looser. The worker's own reads keep sqlite3's fast decoding: this runs only after a failure.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable
from typing import Any, TypeVar

from ..errors import DatabaseError

log = logging.getLogger("errands.sqlite")
T = TypeVar("T")


def lenient_text(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def undecodable(exc: BaseException) -> bool:
    """Whether a (translated) error is sqlite3 failing to decode stored text."""
    cause = exc.__cause__
    return isinstance(cause, sqlite3.OperationalError) and "decode to UTF-8" in str(cause)


def mending(backend: Any, verb: Callable[..., T], *args: Any) -> T:
    """``verb(*args)``; if it failed to decode a stored limit group, mend the groups and
    call it once more (its transaction was rolled back: nothing was half done)."""
    try:
        return verb(*args)
    except DatabaseError as exc:
        if not undecodable(exc):
            raise
    mend_limit_groups(backend)
    return verb(*args)


def mend_limit_groups(backend: Any) -> int:
    """Rewrite every stored limit group that is not UTF-8; how many were."""
    q = backend.q
    mended = 0
    with backend._write("mend_limit_groups") as conn:
        for (raw,) in conn.execute(q["limit_group_bytes"], {}).fetchall():
            try:
                bytes(raw).decode()
            except UnicodeDecodeError:
                fixed = lenient_text(bytes(raw))
                conn.execute(q["mend_limit_group"], {"raw": raw, "fixed": fixed})
                conn.execute(q["mend_limit_starts_group"], {"raw": raw, "fixed": fixed})
                mended += 1
    if mended:
        log.warning(
            "rewrote %d limit group(s) stored as text that is not UTF-8 (by an older errands) "
            "as readable text, so claims can read them (docs/flow-control.md)",
            mended,
        )
    return mended
