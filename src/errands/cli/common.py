"""What every command shares: finding the database, and the two kinds of failure.

The database rule, the same for the CLI and ``errands.Queue()``: ``--db``, else
``$ERRANDS_DB``, else ``errands.db``. CLI commands never create a database by accident: every
command except ``enqueue --create`` refuses a SQLite path that is not already an errands queue,
and commands that only read never migrate (write) it.
"""

from __future__ import annotations

import argparse
import getpass
import os
import re
import sqlite3

from ..backends import redact
from ..core import validate
from ..errors import ErrandsError
from ..queue import DEFAULT_DB, ENV_DB, Queue

SQLITE_MAGIC = b"SQLite format 3\x00"


class UsageError(Exception):
    """Bad usage the parser could not catch (e.g. a --payload that is not JSON): exit 2."""


class CommandFailed(ErrandsError):
    """A failure the user must act on: exit 1."""


def cli_actor() -> str:
    """Who a command acts as (the activity log's and the job events' actor): ``cli:<user>``,
    the login name of whoever runs it, or ``cli`` when the system cannot say."""
    try:
        user = getpass.getuser()
    except (OSError, KeyError):  # no login name and no passwd entry (some containers)
        return "cli"
    return f"cli:{user}"[:200] if user else "cli"


def resolve_db(args: argparse.Namespace) -> str:
    """``--db``, else ``$ERRANDS_DB``, else ``errands.db``."""
    db: str | None = getattr(args, "db", None)
    return db or os.environ.get(ENV_DB) or DEFAULT_DB


def db_was_given(args: argparse.Namespace) -> bool:
    return bool(getattr(args, "db", None))


def db_source(args: argparse.Namespace) -> str:
    """Where the database URL came from, for messages."""
    if db_was_given(args):
        return "--db"
    return f"${ENV_DB}" if os.environ.get(ENV_DB) else f"the default, {DEFAULT_DB}"


_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


def duration(text: str) -> float:
    """``90``, ``1.5``, ``90s``, ``30m``, ``1h``, ``7d``, ``2w`` → seconds: the one argparse type
    of every CLI duration flag (``--delay``, ``--window``, ``--since``, ``--max-wait``…), so
    what docs/cli.md says of durations holds for each of them."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*", text)
    if not match:
        raise argparse.ArgumentTypeError(
            f"{text!r:.40} is not a duration; use seconds or a number with s/m/h/d/w, e.g. 30m"
        )
    value = float(match.group(1)) * _UNITS[match.group(2) or "s"]
    if not value <= validate.MAX_DURATION:  # '9' * 400 is a float infinity
        raise argparse.ArgumentTypeError(
            f"{text:.40} is longer than {validate.MAX_DURATION:.0f} seconds (1000 years)"
        )
    return value


def is_sqlite(url: str) -> bool:
    return "://" not in url or url.startswith("sqlite://")


def _has_queue(path: str) -> bool:
    """Whether the SQLite file holds an errands queue (its migrations table, under any table
    prefix), read without writing (``user_version`` is the app's)."""
    from ..backends import prefix
    from ..backends.sql import queries

    names = prefix.read_only_names(path, queries("sqlite")["installations"])
    return bool(prefix.installed(names))


def sqlite_problem(
    url: str,
    where: str,
    *,
    create: bool,
    need_tables: bool = True,
    create_with: str = "create it by starting your application (errands.Queue(PATH) creates "
    "and migrates it) or with `errands enqueue --create`",
) -> str | None:
    """Why ``url`` (a SQLite path or URL) cannot be opened as an errands queue by a CLI
    command, or None when it can. ``create``: a missing file may be created.
    ``need_tables=False`` (the worker, whose app's Queue migrates its own file): an existing
    SQLite database without errands' tables yet is fine; only a new file is refused.
    ``create_with``: how to create it deliberately, said when it is missing."""
    from ..backends.sqlite import path_from_url

    path = path_from_url(url)
    shown = redact(path)  # a conninfo string given as --db may carry a password
    hint = f"pass --db with the file your application's errands.Queue uses, or set ${ENV_DB} to it"
    if os.path.isdir(path):
        return f"{shown} (from {where}) is a directory, not a database file; {hint}"
    if not os.path.exists(path):
        if create:
            return None
        return slashes_hint(url, path) or (
            f"no queue database at {shown} (from {where}); {create_with}, or {hint}"
        )
    try:
        with open(path, "rb") as f:
            head = f.read(len(SQLITE_MAGIC))
    except OSError as exc:
        return f"cannot read {shown} (from {where}): {exc.strerror}; check its permissions"
    if not head:
        if create:
            return None  # an empty file is what sqlite3 makes a new database from
        return (
            f"{shown} (from {where}) is an empty file, not an errands queue; {hint} "
            "(or delete the empty file)"
        )
    if head != SQLITE_MAGIC:
        return f"{shown} (from {where}) is not an SQLite database; {hint}"
    if create or not need_tables:
        return None
    try:
        has_queue = _has_queue(path)
    except sqlite3.Error as exc:
        return (
            f"{shown} (from {where}) starts like an SQLite database but cannot be read ({exc}); "
            "if it is your queue it may be corrupt: restore it from a backup "
            "(see docs/operations.md)"
        )
    if not has_queue:
        return (
            f"{shown} (from {where}) is an SQLite database without an errands queue in it; "
            f"{hint}, or start your application once so its Queue creates the tables"
        )
    return None


def slashes_hint(url: str, path: str) -> str | None:
    """For a missing ``path`` read from a ``sqlite://`` URL: the URL meant, when the slashes
    say relative and the absolute file exists, or say absolute and the relative one exists."""
    if not url.startswith("sqlite:///"):
        return None
    shown = redact(path)
    if not path.startswith("/"):
        absolute = "/" + path
        if os.path.exists(absolute):
            return (
                f"no queue database at {shown}: sqlite:///{shown} is a path relative to the "
                f"current directory (three slashes); for the absolute path {absolute} write "
                f"sqlite:///{absolute} (four slashes)"
            )
        return None
    relative = path.lstrip("/")
    if relative and os.path.exists(relative):
        return (
            f"no queue database at {shown}: sqlite:///{shown} is the absolute path {shown} "
            f"(four slashes); for {relative} in the current directory ({os.getcwd()}) write "
            f"sqlite:///{relative} (three slashes)"
        )
    return None


def open_queue(args: argparse.Namespace, *, must_exist: bool = True) -> Queue:
    """Open the queue named by --db / $ERRANDS_DB / errands.db for a command.

    ``must_exist=True`` (every command but ``enqueue --create``): a SQLite path must already
    hold an errands queue, so a typo in --db says so instead of quietly creating a new, empty
    database (reads would show "no jobs", enqueues would go where no worker looks)."""
    url = resolve_db(args)
    if is_sqlite(url):
        problem = sqlite_problem(url, db_source(args), create=not must_exist)
        if problem:
            raise CommandFailed(problem)
    return Queue(url)


def add_db(
    parser: argparse.ArgumentParser, *, top_level: bool = False, help: str | None = None
) -> None:
    # On subcommands the default is SUPPRESS so `errands --db X jobs` is not overwritten.
    parser.add_argument(
        "--db",
        metavar="URL",
        default=None if top_level else argparse.SUPPRESS,
        help=help
        or f"database: a SQLite path, sqlite:///relative.db, sqlite:////absolute.db or "
        f"postgresql://… (default: ${ENV_DB}, else {DEFAULT_DB})",
    )


def add_json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
