"""What every command shares: finding the database, and the two kinds of failure."""

from __future__ import annotations

import argparse
import os

from ..errors import ErrandsError
from ..queue import Queue

DEFAULT_DB = "errands.db"
ENV_DB = "ERRANDS_DB"


class UsageError(Exception):
    """Bad usage the parser could not catch (e.g. a --payload that is not JSON): exit 2."""


class CommandFailed(ErrandsError):
    """A failure the user must act on: exit 1."""


def resolve_db(args: argparse.Namespace) -> str:
    """``--db``, else ``$ERRANDS_DB``, else ``errands.db``."""
    db: str | None = getattr(args, "db", None)
    return db or os.environ.get(ENV_DB) or DEFAULT_DB


def db_was_given(args: argparse.Namespace) -> bool:
    return bool(getattr(args, "db", None))


def is_sqlite(url: str) -> bool:
    return "://" not in url or url.startswith("sqlite://")


def open_queue(args: argparse.Namespace, *, must_exist: bool) -> Queue:
    """Open the queue; commands that only read refuse to create a new, empty database (a typo
    in --db would otherwise show "no jobs" instead of the mistake)."""
    url = resolve_db(args)
    if must_exist and is_sqlite(url):
        from ..backends.sqlite import path_from_url

        path = path_from_url(url)
        if not os.path.exists(path):
            where = (
                "--db"
                if db_was_given(args)
                else (f"${ENV_DB}" if os.environ.get(ENV_DB) else "the default")
            )
            raise CommandFailed(
                f"no database at {path} (from {where}); pass --db PATH or set {ENV_DB} "
                "to the file your application uses"
            )
    return Queue(url)


def add_db(parser: argparse.ArgumentParser, *, top_level: bool = False) -> None:
    # On subcommands the default is SUPPRESS so `errands --db X jobs` is not overwritten.
    parser.add_argument(
        "--db",
        metavar="URL",
        default=None if top_level else argparse.SUPPRESS,
        help=f"database path or URL (default: ${ENV_DB}, else {DEFAULT_DB})",
    )


def add_json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
