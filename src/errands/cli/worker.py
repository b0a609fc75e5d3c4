"""``errands worker --app MODULE[:ATTR]``: import the user's app and run its Queue's worker.

The app's ``Queue`` decides which database the worker uses (it is the object the handlers are
registered on). ``--db`` is therefore only a cross-check: if it is given and names another
database than the app's Queue, the worker refuses to start rather than guess. ``$ERRANDS_DB``
is not consulted — the app may read it itself when it builds its Queue.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import logging
import os
import sys
import traceback
from typing import Any

from ..backends import redact
from ..queue import Queue
from ..supervisor import RECYCLE_EXIT, SUPERVISED_ENV
from . import output
from .common import CommandFailed, UsageError, add_db, add_json, is_sqlite
from .jobs import positive_int


def register(sub: Any) -> None:
    p = sub.add_parser(
        "worker",
        help="run jobs with the handlers of your app's Queue",
        description="Import MODULE (from the current directory first, like uvicorn), find its "
        "errands.Queue (ATTR, or the only Queue in the module) and run jobs until SIGTERM/SIGINT "
        "(graceful) or, with --burst, until no job it handles is due. The database is the one "
        "the app's Queue was built with; --db, if given, must name the same database.",
    )
    p.add_argument("--app", required=True, metavar="MODULE[:ATTR]", help="e.g. myapp.jobs:q")
    p.add_argument(
        "--concurrency",
        type=positive_int,
        default=8,
        metavar="N",
        help="jobs run at once (default 8)",
    )
    p.add_argument(
        "--processes",
        type=positive_int,
        default=1,
        metavar="P",
        help="run P worker processes under a supervisor that restarts any that die (default 1)",
    )
    p.add_argument("--queues", metavar="a,b", help="only these queues (default: all)")
    p.add_argument(
        "--burst", action="store_true", help="exit when no job this worker handles is due"
    )
    p.add_argument("--quiet", action="store_true", help="log warnings only")
    add_db(p)
    add_json(p)
    p.set_defaults(func=cmd_worker)


def load_app(spec: str) -> Queue:
    """``module`` or ``module:attr`` → the Queue. The current directory is searched first so
    ``errands worker --app tasks`` finds ./tasks.py, as ``python -m`` and uvicorn do."""
    module_name, _, attr = spec.partition(":")
    if not module_name or (":" in spec and not attr):
        raise UsageError(f"--app {spec!r} should be MODULE or MODULE:ATTR, e.g. myapp.jobs:q")
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise CommandFailed(
                f"cannot import {module_name!r} (no module named {exc.name!r} from {cwd}); "
                "run from your project directory or fix the --app path"
            ) from None
        raise _app_raised(module_name) from None
    except Exception:
        raise _app_raised(module_name) from None
    if attr:
        obj = module
        for part in attr.split("."):
            if not hasattr(obj, part):
                raise CommandFailed(
                    f"{module_name} has no attribute {attr!r}; name the errands.Queue, "
                    f"e.g. --app {module_name}:q"
                )
            obj = getattr(obj, part)
        if not isinstance(obj, Queue):
            raise CommandFailed(
                f"{spec} is a {type(obj).__name__}, not an errands.Queue; point --app at the "
                "Queue your tasks are registered on"
            )
        return obj
    found = {id(v): (k, v) for k, v in vars(module).items() if isinstance(v, Queue)}
    if not found:
        raise CommandFailed(
            f"{module_name} defines no errands.Queue at module level; create one there "
            f"(q = errands.Queue(...)) or name it with --app {module_name}:ATTR"
        )
    if len(found) > 1:
        names = ", ".join(sorted(k for k, _ in found.values()))
        raise CommandFailed(
            f"{module_name} has several Queues ({names}); choose one with --app {module_name}:NAME"
        )
    ((_, queue),) = found.values()
    return queue


def _app_raised(module_name: str) -> CommandFailed:
    # The user's own module failed: its traceback is what they need to fix it.
    traceback.print_exc(file=sys.stderr)
    kind, value = sys.exc_info()[:2]
    name = kind.__name__ if kind else "error"
    return CommandFailed(f"importing {module_name} raised {name}: {value}; see the traceback above")


def _same_db(a: str, b: str) -> bool:
    if is_sqlite(a) and is_sqlite(b):
        from ..backends.sqlite import path_from_url

        return os.path.realpath(path_from_url(a)) == os.path.realpath(path_from_url(b))
    return a == b


def cmd_worker(args: argparse.Namespace) -> int:
    queue = load_app(args.app)
    db = getattr(args, "db", None)
    if db and not _same_db(db, queue.url):
        raise UsageError(
            f"--db {redact(db)} differs from the database of {args.app}'s Queue "
            f"({queue.display_url}); the "
            "worker uses the app's Queue — drop --db or build the Queue from the right URL"
        )
    queues = (
        None if args.queues is None else [s.strip() for s in args.queues.split(",") if s.strip()]
    )
    if args.queues is not None and not queues:
        raise UsageError("--queues needs at least one queue name, e.g. --queues emails,reports")
    if args.processes > 1:
        return _supervise(args, queue)
    logging.basicConfig(
        level=logging.WARNING if args.quiet else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if not args.quiet:
        print(
            f"errands worker: {queue.display_url}, tasks {', '.join(sorted(queue.tasks)) or '-'}, "
            f"queues {', '.join(queues) if queues else 'all'}, concurrency {args.concurrency}"
            + (", burst" if args.burst else ""),
            file=sys.stderr,
        )
    supervised = os.environ.get(SUPERVISED_ENV) == "1"
    try:
        summary = queue.run_worker(
            concurrency=args.concurrency,
            queues=queues,
            burst=args.burst,
            recycle_on_timeout=supervised,
            supervised=supervised,
        )
    finally:
        queue.close()
    if args.json:
        output.emit_json({**dataclasses.asdict(summary), "processed": summary.processed})
    elif not args.quiet:
        print(
            f"errands worker {summary.worker_id} stopped: {summary.succeeded} succeeded, "
            f"{summary.retried} to retry, {summary.failed} failed, {summary.cancelled} cancelled, "
            f"{summary.released} released",
            file=sys.stderr,
        )
    return RECYCLE_EXIT if summary.recycled else 0


def _supervise(args: argparse.Namespace, queue: Queue) -> int:
    """--processes P: the app was imported once here to check it; each child imports it
    afresh (spawned, never forked with an open connection)."""
    from ..supervisor import Supervisor

    shutdown = queue.settings.shutdown_timeout
    queue.close()
    child = ["--app", args.app, "--concurrency", str(args.concurrency)]
    if args.queues:
        child += ["--queues", args.queues]
    if args.burst:
        child.append("--burst")
    if args.quiet:
        child.append("--quiet")
    logging.basicConfig(
        level=logging.WARNING if args.quiet else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    return Supervisor(child, args.processes, shutdown, burst=args.burst).run()
