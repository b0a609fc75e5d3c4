"""Table prefixes: errands beside an application's own ``jobs`` or ``workers`` tables.

A prefix (``Queue(url, table_prefix="errands_")`` or ``?table_prefix=errands_`` in the URL)
is chosen once, when errands first creates its tables, and recorded by their names alone
(``errands_jobs``, ``errands_errands_migrations``…): a process that names none finds it
(``choose``). Every statement errands runs gets it at load (``sql.with_prefix``).
"""

from __future__ import annotations

import os
import re
import sqlite3
from urllib.parse import parse_qsl, quote, unquote

from ..errors import ConfigurationError, SchemaConflictError
from .sql import MIGRATIONS_TABLE
from .urls import redact

PARAM = "table_prefix"
RULE = re.compile(r"[a-z][a-z0-9_]{0,30}")
RULE_TEXT = (
    "a lowercase letter, then up to 30 lowercase letters, digits or underscores "
    "([a-z][a-z0-9_]{0,30}, e.g. 'errands_'), or '' for none"
)


def validate_prefix(prefix: object, what: str = "table_prefix") -> str:
    """``prefix`` if it follows the rule ('' names no prefix), else a ConfigurationError
    naming the rule."""
    if not isinstance(prefix, str) or not (prefix == "" or RULE.fullmatch(prefix)):
        raise ConfigurationError(f"{what} must be {RULE_TEXT}; got {prefix!r:.60}")
    return prefix


def split_url(url: str) -> tuple[str, str | None]:
    """``url`` without its ``table_prefix`` query parameter, and that parameter (validated),
    or None when it names none. The driver never sees it: psycopg would refuse an unknown
    parameter, and SQLite would make it part of the file name."""
    base, sep, query = url.partition("?")
    if not sep or PARAM not in query:
        return url, None
    pairs = parse_qsl(query, keep_blank_values=True)
    named = [v for k, v in pairs if k == PARAM]
    if not named:
        return url, None
    if len(set(named)) > 1:
        raise ConfigurationError(
            f"{redact(url)} names {PARAM} {len(named)} times ({', '.join(map(repr, named))}); "
            "name it once"
        )
    prefix = validate_prefix(named[0], f"{PARAM} in the URL")
    # The other parameters stay exactly as written (libpq decodes them itself).
    rest = [part for part in query.split("&") if part and unquote(part.split("=")[0]) != PARAM]
    if rest and (url.startswith("sqlite://") or "://" not in url):
        raise ConfigurationError(
            f"{redact(url)}: a SQLite URL takes only {PARAM} as a query parameter; "
            f"remove {', '.join(part.split('=')[0] for part in rest)}"
        )
    return (f"{base}?{'&'.join(rest)}" if rest else base), prefix


def combine(from_url: str | None, from_argument: str | None, url: str) -> str | None:
    """The prefix a process names: the URL's and the Queue argument's must agree."""
    if from_argument is not None:
        validate_prefix(from_argument)
    if from_url is not None and from_argument is not None and from_url != from_argument:
        raise ConfigurationError(
            f"{redact(url)} names {PARAM}={from_url!r} but the Queue was given "
            f"table_prefix={from_argument!r}; name one"
        )
    return from_url if from_url is not None else from_argument


def installed(table_names: list[str]) -> list[str]:
    """The prefixes of the errands installations whose migrations tables are named here
    ('' for an unprefixed one), sorted."""
    found = set()
    for name in table_names:
        if name.endswith(MIGRATIONS_TABLE):
            prefix = name[: -len(MIGRATIONS_TABLE)]
            if prefix == "" or RULE.fullmatch(prefix):
                found.add(prefix)
    return sorted(found)


def _label(prefix: str) -> str:
    return f"table_prefix={prefix!r}" if prefix else "no table prefix"


def choose(named: str | None, found: list[str], where: str) -> str:
    """The prefix to use: the one named, or the one installation found. A named prefix that
    no installation here has while another one exists, or two installations and none named,
    is refused: a typo must not start a second, empty queue beside the real one."""
    if named is not None:
        if found and named not in found:
            raise SchemaConflictError(
                f"{where} holds errands tables with {', '.join(map(_label, found))}, not "
                f"table_prefix={named!r}; name the prefix they were created with (or none, "
                "and errands finds it) — nothing was changed"
            )
        return named
    if "" in found or not found:
        return ""
    if len(found) > 1:
        raise SchemaConflictError(
            f"{where} holds {len(found)} errands installations "
            f"({', '.join(map(_label, found))}); name the one to open with table_prefix=… "
            "(Queue argument, or ?table_prefix=… in the URL) — nothing was changed"
        )
    return found[0]


def read_only_names(path: str, query: str) -> list[str]:
    """The first column of ``query`` on the SQLite file at ``path``, opened read-only (a
    missing file, or a directory: none, and opening it says what is wrong): the discovery
    reads an application's file without changing it."""
    if not os.path.isfile(path):
        return []
    conn = sqlite3.connect(f"file:{quote(path)}?mode=ro", uri=True)
    try:
        return [str(row[0]) for row in conn.execute(query)]
    finally:
        conn.close()
