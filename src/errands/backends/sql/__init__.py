"""Loads the named queries of a dialect from every ``<dialect>/*.sql`` file (one per concern:
``jobs.sql``, ``ops.sql``, ``periodic.sql``…) and its migrations from ``migration_NNNN.sql``.

A query file is a list of blocks, each starting with ``-- name: NAME`` and a one-line comment
that says what it does. Both dialects define the same names
(tests/backends/test_sql_names.py) with the same result columns
(tests/backends/test_sql_columns.py) — except a dialect's ``own.sql``
(``own_queries``): statements only that dialect has, each standing in for several shared
ones where that saves round trips, run by a hook on its backend class; a shared query that
hook always replaces is not kept in that dialect at all (``REPLACED``). Every dialect writes
parameters as ``:name``; for PostgreSQL they are rewritten once, at load, into psycopg's
``%(name)s``.

A block starting with ``-- fragment: NAME`` is not a query but a piece of one, written once
so that several queries cannot drift apart: ``due_job`` (``due.sql``), what a job must be for
a claim to take it. A query writes ``{{NAME}}`` where the fragment goes, and the loader
splices it in before anything else (the table prefix, the parameter style): every line of
the fragment after its first takes the indentation of the placeholder's line. Double braces,
because they are never SQL outside a literal, and a single ``{table}`` is a placeholder of
vacuum.sql that its caller fills. A fragment binds its own parameters (the query must bind
them too), holds no placeholder itself, and is neither a query (``queries`` leaves it out)
nor checked by query-name parity: both dialects define the same fragment names
(``fragments``; tests/backends/test_sql_names.py). An unknown placeholder and a fragment no
query uses are errors at load.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import cache
from importlib import resources

_BLOCK = re.compile(r"^-- (name|fragment): (\w+)\s*$", re.MULTILINE)
# A fragment's placeholder, found one token at a time like a parameter (_TOKEN): a string
# literal, a quoted identifier or a comment is kept whole, so braces inside them are text.
_PLACEHOLDER = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|--[^\n]*|\{\{(\w+)\}\}|\{\{|\}\}")
# One token at a time, leftmost alternative first: a string literal or quoted identifier is kept
# whole, '::' is a cast (not a parameter), ':name' is a parameter, and a bare '%' must be doubled
# for psycopg.
_TOKEN = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|::|:([A-Za-z_]\w*)|%")


def to_pyformat(statement: str) -> str:
    """``:name`` parameters → ``%(name)s``, leaving casts, literals and identifiers alone."""

    def swap(match: re.Match[str]) -> str:
        token = match.group(0)
        if match.group(1) is not None:
            return f"%({match.group(1)})s"
        return "%%" if token == "%" else token

    return _TOKEN.sub(swap, statement)


# How each dialect's driver wants the ``:name`` parameters: sqlite3 takes them as written.
PARAMETER_STYLE: dict[str, Callable[[str], str]] = {
    "sqlite": lambda statement: statement,
    "postgres": to_pyformat,
}


def blocks(text: str) -> tuple[dict[str, str], dict[str, str]]:
    """The queries and the fragments of one file, by name, without their comment lines."""
    found: dict[str, dict[str, str]] = {"name": {}, "fragment": {}}
    parts = _BLOCK.split(text)
    for kind, name, body in zip(parts[1::3], parts[2::3], parts[3::3], strict=True):
        if name in found[kind]:
            raise ValueError(f"{'query' if kind == 'name' else kind} {name!r} is defined twice")
        statement = "\n".join(
            line for line in body.strip().splitlines() if not line.lstrip().startswith("--")
        ).strip()
        found[kind][name] = statement.rstrip(";").strip()
    return found["name"], found["fragment"]


def parse(text: str) -> dict[str, str]:
    """The queries of one file (its fragments left out)."""
    return blocks(text)[0]


def splice(statement: str, fragments: dict[str, str], used: set[str]) -> str:
    """``statement`` with each ``{{NAME}}`` outside a literal or a comment replaced by the
    fragment of that name, re-indented to the placeholder's line; the names it used are
    added to ``used``. An unknown name, or a stray ``{{`` or ``}}``, is a ValueError."""

    def swap(match: re.Match[str]) -> str:
        token, name = match.group(0), match.group(1)
        if name is None:
            if token in ("{{", "}}"):
                raise ValueError(f"{token!r} outside a placeholder {{{{NAME}}}}")
            return token
        if name not in fragments:
            raise ValueError(f"unknown fragment {{{{{name}}}}}")
        used.add(name)
        line = statement[statement.rfind("\n", 0, match.start()) + 1 : match.start()]
        indent = line[: len(line) - len(line.lstrip())]
        return fragments[name].replace("\n", "\n" + indent)

    return _PLACEHOLDER.sub(swap, statement)


def _query_files(dialect: str) -> list[tuple[str, str]]:
    """(file name, text) of every query file of ``dialect`` (not its migrations), by name."""
    return [
        (entry.name, entry.read_text())
        for entry in sorted(
            resources.files(__package__).joinpath(dialect).iterdir(), key=lambda e: e.name
        )
        if entry.name.endswith(".sql") and not entry.name.startswith("migration_")
    ]


def assemble(dialect: str, files: list[tuple[str, str]], prefix: str = "") -> dict[str, str]:
    """The queries of ``files`` (file name, text) as ``queries`` returns them: fragments
    spliced in, then the table ``prefix`` and the dialect's parameter style applied. A name
    defined twice, an unknown placeholder, a fragment holding one or used by no query are
    ValueErrors."""
    statements: dict[str, str] = {}
    fragments: dict[str, str] = {}
    for file_name, text in files:
        found, parts = blocks(text)
        for name, statement in found.items():
            if name in statements:
                raise ValueError(
                    f"{dialect}: query {name!r} of {file_name} is defined in two files"
                )
            statements[name] = statement
        for name, part in parts.items():
            where = f"{dialect}: fragment {name!r} of {file_name}"
            if name in fragments:
                raise ValueError(f"{where} is defined in two files")
            # Spliced once, not again: a placeholder in a fragment would reach the database.
            if any(m.group(0)[:2] in ("{{", "}}") for m in _PLACEHOLDER.finditer(part)):
                raise ValueError(f"{where} holds a placeholder")
            fragments[name] = part
    used: set[str] = set()
    merged: dict[str, str] = {}
    for name, statement in statements.items():
        try:
            spliced = splice(statement, fragments, used)
        except ValueError as e:
            raise ValueError(f"{dialect}: query {name!r}: {e}") from None
        merged[name] = PARAMETER_STYLE[dialect](with_prefix(dialect, spliced, prefix))
    if unused := sorted(set(fragments) - used):
        raise ValueError(f"{dialect}: fragment {unused[0]!r} is used by no query")
    return merged


@cache
def queries(dialect: str, prefix: str = "") -> dict[str, str]:
    """Every named query of a dialect: all its ``*.sql`` files except migrations, so
    concerns can live in files of their own (jobs, ops, periodic…), with its fragments
    spliced in; with a table ``prefix``, every name of errands' objects in them carries it
    (``with_prefix``)."""
    return assemble(dialect, _query_files(dialect), prefix)


@cache
def fragments(dialect: str) -> dict[str, str]:
    """Every fragment of a dialect by name, as written (the parity tests compare the names)."""
    return {
        name: part for _, text in _query_files(dialect) for name, part in blocks(text)[1].items()
    }


OWN_FILE = "own.sql"

# Shared queries a dialect does not define, because one of its own (own.sql) always runs in
# their place: PostgreSQL's plain claim is claim_recorded (PostgresClaim._claim_rows), so it
# keeps no claim to maintain beside it. The parity tests leave these names out.
REPLACED: dict[str, frozenset[str]] = {"postgres": frozenset({"claim"}), "sqlite": frozenset()}


@cache
def own_queries(dialect: str) -> frozenset[str]:
    """The names of the queries only ``dialect`` has (its ``own.sql``, if any); the parity
    tests leave them out."""
    entry = resources.files(__package__).joinpath(dialect).joinpath(OWN_FILE)
    return frozenset(parse(entry.read_text())) if entry.is_file() else frozenset()


@cache
def migrations(dialect: str, prefix: str = "") -> tuple[tuple[int, str], ...]:
    """(version, script) pairs in order; with a table ``prefix``, the names of errands'
    objects in them carry it (``with_prefix``)."""
    found = []
    for entry in resources.files(__package__).joinpath(dialect).iterdir():
        match = re.fullmatch(r"migration_(\d{4})\.sql", entry.name)
        if match:
            found.append((int(match.group(1)), with_prefix(dialect, entry.read_text(), prefix)))
    found.sort()
    versions = [v for v, _ in found]
    if versions != list(range(1, len(versions) + 1)):
        raise RuntimeError(f"{dialect} migrations are not numbered 1..n: {versions}")
    return tuple(found)


# CREATE [OR REPLACE] [UNIQUE] TABLE|INDEX|VIEW|TRIGGER|SEQUENCE|FUNCTION [IF NOT EXISTS] name —
# comments stripped first, so a commented-out statement does not count. (OR REPLACE: the
# SQL enqueue function of migration 13, docs/from-other-languages.md.)
_CREATED = re.compile(
    r"\bCREATE\s+(?:OR\s+REPLACE\s+)?(?:UNIQUE\s+)?(TABLE|INDEX|VIEW|TRIGGER|SEQUENCE|FUNCTION)\s+(?:IF\s+NOT\s+EXISTS\s+)?"
    r"\"?(\w+)\"?",
    re.IGNORECASE,
)
# ALTER TABLE … DROP|ADD CONSTRAINT [IF EXISTS] name: a later migration replacing a CHECK
# names the constraint PostgreSQL generated as <table>_<column>_check, so with a prefix the
# name must carry it too (errands_jobs_status_check), or the DROP misses the old CHECK.
_CONSTRAINT = re.compile(
    r"\b(?:DROP|ADD)\s+CONSTRAINT\s+(?:IF\s+EXISTS\s+)?\"?(\w+)\"?", re.IGNORECASE
)


@cache
def created_objects(dialect: str) -> tuple[tuple[str, str], ...]:
    """(kind, name) of every object the migrations of ``dialect`` create, read from the
    migration scripts themselves, so the list of names errands needs cannot drift from them."""
    found: dict[str, str] = {}
    for _, script in migrations(dialect):
        body = "\n".join(line.split("--", 1)[0] for line in script.splitlines())
        for kind, name in _CREATED.findall(body):
            found.setdefault(name.lower(), kind.lower())
    return tuple(sorted((kind, name) for name, kind in found.items()))


# The objects errands keeps outside the migrations' CREATE statements: its migrations table
# (schema.sql) and, on PostgreSQL, the wake-up channels (LISTEN/NOTIFY names share the whole
# database, so a second installation must not wake the first one's workers).
MIGRATIONS_TABLE = "errands_migrations"
CHANNELS = {"sqlite": (), "postgres": ("errands_jobs", "errands_finished")}


@cache
def object_names(dialect: str) -> frozenset[str]:
    """The one list of names a table prefix applies to: every table, index, trigger, view,
    sequence and function errands' migrations create (read from the scripts, so it cannot
    drift from them), its migrations table and its channels."""
    return frozenset(
        {name for _, name in created_objects(dialect)}
        | set(named_constraints(dialect))
        | {MIGRATIONS_TABLE, *CHANNELS[dialect]}
    )


@cache
def named_constraints(dialect: str) -> tuple[str, ...]:
    """The constraints a migration drops or adds by name (a CHECK replaced in place)."""
    found: set[str] = set()
    for _, script in migrations(dialect):
        body = "\n".join(line.split("--", 1)[0] for line in script.splitlines())
        found.update(name.lower() for name in _CONSTRAINT.findall(body))
    return tuple(sorted(found))


# One token at a time, leftmost first: a comment, a string literal, a quoted identifier, a
# parameter (:name, or psycopg's %(name)s) or a cast are kept whole; a bare word is a name.
_NAMES = re.compile(
    r"--[^\n]*|'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|::|:[A-Za-z_]\w*|%\([A-Za-z_]\w*\)s"
    r"|\b[A-Za-z_]\w*\b"
)


def with_prefix(dialect: str, statement: str, prefix: str) -> str:
    """``statement`` with every name of ``object_names(dialect)`` carrying ``prefix``: a bare
    word, a quoted identifier, or a string literal that is exactly such a name (how the
    catalog queries and ``pg_notify`` name them). Comments, other literals, parameters and
    column names are left alone (no column of errands' shares a name with one of its objects:
    tests/backends/test_table_prefix.py). ``prefix`` is checked by the caller
    (``validate_prefix``)."""
    if not prefix:
        return statement
    names = object_names(dialect)

    def swap(match: re.Match[str]) -> str:
        token = match.group(0)
        if token[0] in "'\"":
            inner = token[1:-1]
            return f"{token[0]}{prefix}{inner}{token[0]}" if inner.lower() in names else token
        if token.lower() in names:
            return prefix + token
        return token

    return _NAMES.sub(swap, statement)
