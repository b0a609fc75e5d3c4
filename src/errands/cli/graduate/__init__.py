"""The ``errands graduate`` command. ``register(subparsers)`` adds it to the CLI's parser; the
parsed arguments carry ``func`` (returns the exit status)."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from ...backends import redact, scrub
from ...errors import ErrandsError
from ...queue import MAX_BATCH
from .. import output
from ..common import add_db, db_source, is_sqlite, resolve_db, sqlite_problem
from ..jobs import int_between


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "graduate",
        help="copy this SQLite queue to PostgreSQL (ids kept, verified)",
        description=(
            "Copy every job, attempt, event, blob, schedule, worker row and rollup from the "
            "SQLite queue to PostgreSQL, keeping ids, then verify counts and checksums. Stop "
            "workers first (see docs/postgres.md). Safe to run again after an interruption."
        ),
    )
    parser.add_argument("--to", required=True, metavar="URL", help="postgresql://user@host/db")
    add_db(parser)
    parser.add_argument(
        "--force",
        action="store_true",
        help="copy into a target that already has errands rows (rows whose ids exist are kept)",
    )
    parser.add_argument(
        "--ignore-live-workers",
        action="store_true",
        help="copy even while a worker is alive on the source (its later outcomes are missed)",
    )
    parser.add_argument(
        "--batch-size", type=int_between(1, MAX_BATCH), default=5000, help="rows per transaction"
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.set_defaults(func=run)

    reopen = subparsers.add_parser(
        "reopen",
        help="take new work again on a SQLite file that errands graduate moved away",
        description=(
            "After `errands graduate`, the SQLite file refuses new work (a worker, an enqueue) "
            "so that nothing runs twice. Reopen it only on purpose: when the move is undone, "
            "or the file is to be a queue of its own again."
        ),
    )
    add_db(reopen)
    reopen.set_defaults(func=run_reopen)


def run(args: argparse.Namespace) -> int:
    from .copy import graduate

    if not args.to.startswith(("postgresql://", "postgres://")):
        output.error(
            f"--to must be a postgresql:// URL (the target), got {redact(args.to)!r}; "
            "e.g. errands graduate --db app.db --to postgresql://app@db.internal/app"
        )
        return 2
    source = resolve_db(args)
    if not is_sqlite(source):
        output.error(
            f"the source ({db_source(args)}) is {redact(source)}, a PostgreSQL URL: graduate "
            "copies a SQLite file to PostgreSQL; pass the SQLite file with --db, "
            "e.g. --db app.db"
        )
        return 2
    problem = sqlite_problem(source, db_source(args), create=False)
    if problem:
        output.error(problem)
        return 1
    last = [0.0]

    def progress(table: str, done: int, total: int) -> None:
        now = time.monotonic()
        if now - last[0] >= 0.2 or done >= total:  # a live line, not a scroll of them
            last[0] = now
            end = "\n" if done >= total else ""
            print(f"\r{table:<18} {done:>9}/{total}", end=end, file=sys.stderr, flush=True)

    try:
        report = graduate(
            source,
            args.to,
            batch_size=args.batch_size,
            progress=None if args.json else progress,
            force=args.force,
            ignore_live_workers=args.ignore_live_workers,
        )
    except ErrandsError as exc:
        output.error(scrub(str(exc), source, args.to))
        return 1
    if args.json:
        import json

        print(
            json.dumps(
                {
                    "ok": report.ok,
                    "complete": report.complete,
                    "resumed": report.resumed,
                    "seconds": round(report.seconds, 3),
                    "tables": [
                        {
                            "name": t.name,
                            "source_rows": t.source_rows,
                            "copied": t.copied,
                            "skipped": t.skipped,
                            "target_rows": t.target_rows,
                            "ok": t.ok,
                        }
                        for t in report.tables
                    ],
                }
            )
        )
    else:
        print(report.summary())
        if report.ok:
            print(
                f"now point your workers and application at {redact(args.to)} "
                f"(ERRANDS_DB={redact(args.to)}; see docs/postgres.md, cut-over)"
            )
            if report.table_prefix:
                print(
                    f"errands' tables there carry the prefix {report.table_prefix!r}, as in "
                    "the file: processes that name no table_prefix find it"
                )
    return 0 if report.ok else 1


def run_reopen(args: argparse.Namespace) -> int:
    from ...queue import Queue

    source = resolve_db(args)
    problem = sqlite_problem(source, db_source(args), create=False) if is_sqlite(source) else None
    if problem:
        output.error(problem)
        return 1
    try:
        with Queue(source, allow_graduated=True) as q:
            was = q.graduation()
            q.reopen()
    except ErrandsError as exc:
        output.error(scrub(str(exc), source))
        return 1
    if was is None:
        print(f"{redact(source)} was not graduated: nothing to reopen")
    else:
        print(
            f"reopened {redact(source)}: it takes new work again (it had graduated to "
            f"{was.target}; make sure no worker runs the same jobs there)"
        )
    return 0
