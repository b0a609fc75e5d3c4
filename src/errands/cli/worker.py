"""``errands worker --app MODULE[:ATTR]``: import the user's app and run its Queue's worker.

The app's ``Queue`` decides which database the worker uses (it is the object the handlers are
registered on). ``--db`` and ``$ERRANDS_DB`` are cross-checks that cannot strand jobs: if
either names another database than the app's Queue, the worker refuses to start (exit 2) and
says which is which, rather than run on one database while the jobs wait in another. An app
that builds ``errands.Queue()`` without a URL follows ``$ERRANDS_DB`` itself.
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
from ..errors import DatabaseReplacedError, ErrandsError, GraduatedError, QueueClosedError
from ..limits import unused_queue_warning, unused_queues
from ..queue import ENV_DB, Queue
from ..worker import log as worker_log
from ..worker.supervisor import FATAL_EXIT, RECYCLE_EXIT, SUPERVISED_ENV
from . import output
from .common import (
    CommandFailed,
    UsageError,
    add_db,
    add_json,
    db_source,
    is_sqlite,
    resolve_db,
    sqlite_problem,
)
from .jobs import positive_int

log = logging.getLogger("errands.worker")


def register(sub: Any) -> None:
    p = sub.add_parser(
        "worker",
        help="run jobs with the handlers of your app's Queue",
        description="Import MODULE (from the current directory first, like uvicorn), find its "
        "errands.Queue (ATTR, or the only Queue in the module) and run jobs until SIGTERM/SIGINT "
        "(graceful) or, with --burst, until no job it handles is due. The database is the one "
        "the app's Queue was built with (errands.Queue() with no URL reads $ERRANDS_DB, else "
        "errands.db). --db and $ERRANDS_DB, when set, must name that same database: otherwise "
        "the worker refuses to start (exit 2) instead of running where no jobs are.",
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
    p.add_argument(
        "--quiet", action="store_true", help="log warnings only (failed attempts, rescues…)"
    )
    p.add_argument(
        "--verbose",
        action="store_true",
        help="also log every job started and finished, with its duration",
    )
    p.add_argument(
        "--log-format",
        choices=["text", "json"],
        default="text",
        help="json: one JSON object per line, for log shippers (default text)",
    )
    p.add_argument(
        "--create",
        action="store_true",
        help="let the app's Queue create the SQLite file named by --db or $ERRANDS_DB if it does "
        "not exist (otherwise the worker refuses: a new file holds none of your jobs)",
    )
    add_db(
        p,
        help="a cross-check only: must name the database of the app's Queue, or the worker "
        "refuses to start (the same check applies to $ERRANDS_DB)",
    )
    add_json(p)
    p.set_defaults(func=cmd_worker)


def load_app(spec: str) -> Queue:
    """``module`` or ``module:attr`` → the Queue. The current directory is searched first so
    ``errands worker --app tasks`` finds ./tasks.py, as ``python -m`` and uvicorn do."""
    module_name, _, attr = spec.partition(":")
    if not module_name or (":" in spec and not attr):
        raise UsageError(f"--app {spec!r} should be MODULE or MODULE:ATTR, e.g. myapp.jobs:q")
    if module_name.endswith(".py") or "/" in module_name:
        # A file path where a module name belongs: say the name to use.
        name = module_name.removesuffix(".py").strip("/").replace("/", ".")
        raise UsageError(
            f"--app takes a module name, not a file: use --app {name}"
            + (f":{attr}" if attr else "")
            + " (run from the directory that holds it)"
        )
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


def _same_db(a: str, b: str, prefix: str) -> bool:
    """Whether ``a`` names the database of the Queue at ``b`` (which uses table ``prefix``):
    a ``?table_prefix=`` in ``a`` must be that prefix; the one found when none is named."""
    from ..backends.prefix import split_url

    a, named = split_url(a)
    b = split_url(b)[0]
    if named is not None and named != prefix:
        return False
    if is_sqlite(a) and is_sqlite(b):
        from ..backends.sqlite import path_from_url

        return os.path.realpath(path_from_url(a)) == os.path.realpath(path_from_url(b))
    if is_sqlite(a) or is_sqlite(b):
        return False
    return _pg_key(a) == _pg_key(b)


def _pg_key(url: str) -> str:
    scheme, _, rest = url.partition("://")
    return f"{'postgresql' if scheme == 'postgres' else scheme}://{rest.rstrip('/')}"


def check_database(spec: str, queue: Queue, db: str | None) -> None:
    """Refuse to start when --db or $ERRANDS_DB names another database than the app's Queue:
    a worker on the wrong database processes nothing while the jobs wait elsewhere."""
    if db and not _same_db(db, queue.url, queue.table_prefix):
        raise UsageError(
            f"--db {redact(db)} differs from the database of {spec}'s Queue "
            f"({queue.display_url}); the worker runs on the app's Queue — drop --db, or build "
            "the Queue from the right URL (errands.Queue() with no URL reads $ERRANDS_DB)"
        )
    env = os.environ.get(ENV_DB)
    if env and not db and not _same_db(env, queue.url, queue.table_prefix):
        raise UsageError(
            f"${ENV_DB} is {redact(env)} but {spec}'s Queue uses {queue.display_url}; the worker "
            f"runs on the app's Queue — build it with errands.Queue() (no URL: it reads "
            f"${ENV_DB}) or errands.Queue(os.environ['{ENV_DB}']), or unset ${ENV_DB}"
        )


def check_new_file(args: argparse.Namespace) -> bool:
    """Before the app is imported (its Queue creates a missing SQLite file): refuse a --db or
    $ERRANDS_DB that names no file, unless --create. Returns whether the file the worker will
    name (also the default errands.db) is missing now, so a creation can be said afterwards."""
    url = resolve_db(args)
    if not is_sqlite(url):
        return False
    from ..backends.sqlite import path_from_url

    missing = not os.path.exists(path_from_url(url))
    named = getattr(args, "db", None) or os.environ.get(ENV_DB)
    if named and not args.create:
        problem = sqlite_problem(
            url,
            db_source(args),
            create=False,
            need_tables=False,
            create_with="a worker creates no database unless you pass --create",
        )
        if problem:
            raise CommandFailed(problem)
    return missing


def say_created(args: argparse.Namespace, queue: Queue, was_missing: bool) -> None:
    """Loudly, when the app's Queue has just created the file the worker was pointed at: a new
    file holds none of the jobs the application enqueued elsewhere."""
    named = resolve_db(args)
    if not (
        was_missing and is_sqlite(queue.url) and _same_db(named, queue.url, queue.table_prefix)
    ):
        return
    from ..backends.sqlite import path_from_url

    where = os.path.abspath(path_from_url(queue.url))
    if args.create:
        print(f"errands worker: created a new, empty queue database at {where}", file=sys.stderr)
        return
    print(
        f"errands worker: WARNING: the Queue of {args.app} created a new, empty queue database at "
        f"{where} (no --db, no ${ENV_DB}: the default); if your jobs are in another file, stop "
        f"this worker and set ${ENV_DB} to it",
        file=sys.stderr,
    )


def cmd_worker(args: argparse.Namespace) -> int:
    was_missing = check_new_file(args)
    queue = load_app(args.app)
    try:
        check_database(args.app, queue, getattr(args, "db", None))
    except UsageError:
        queue.close()
        raise
    say_created(args, queue, was_missing)
    queues = (
        None if args.queues is None else [s.strip() for s in args.queues.split(",") if s.strip()]
    )
    if args.queues is not None and not queues:
        raise UsageError("--queues needs at least one queue name, e.g. --queues emails,reports")
    try:
        queue.refuse_if_graduated()  # before any child starts: restarting it cannot help
        unused = unused_queues(
            queue.reads,
            queues or [],
            (t.options.queue for t in queue.tasks.values()),
            queue.clock(),
            queue.settings.lease_seconds,
        )
    except ErrandsError:
        queue.close()
        raise
    if unused and os.environ.get(SUPERVISED_ENV) != "1":  # said once, by the parent
        # It may still be right (jobs enqueued later): said, not refused.
        print(f"errands: {unused_queue_warning(unused)}", file=sys.stderr)
    if args.processes > 1:
        return _supervise(args, queue)
    worker_log.configure(quiet=args.quiet, verbose=args.verbose, fmt=args.log_format)
    banner = (
        f"errands worker: {queue.display_url}, tasks {', '.join(sorted(queue.tasks)) or '-'}, "
        f"queues {', '.join(queues) if queues else 'all'}, concurrency {args.concurrency}"
        + (", burst" if args.burst else "")
    )
    if args.log_format == "json":
        log.info(banner, extra={"errands": {"event": "worker_started"}})
    elif not args.quiet:
        print(banner, file=sys.stderr)
    supervised = os.environ.get(SUPERVISED_ENV) == "1"
    try:
        summary = queue.run_worker(
            concurrency=args.concurrency,
            queues=queues,
            burst=args.burst,
            recycle_on_timeout=supervised,
            supervised=supervised,
        )
    except (DatabaseReplacedError, GraduatedError) as exc:
        if not supervised:
            raise
        output.error(str(exc))
        # A restart would only create an empty file where the old one was, or be refused again.
        return FATAL_EXIT
    except QueueClosedError as exc:
        output.error(str(exc))
        return 1
    finally:
        queue.close()
    if summary.queue_closed:
        # Only the app's own code can close its Queue under this worker: a bug to fix, so
        # not the clean exit 0 (the supervisor restarts the process, with backoff).
        output.error(
            "the application closed its Queue while the worker ran (q.close() or `with q:` "
            "in a handler?); the worker stopped: running jobs finished, prefetched ones were "
            "handed back — close the Queue only after run_worker returns"
        )
        return 1
    stopped = (
        f"errands worker {summary.worker_id} stopped: {summary.succeeded} succeeded, "
        f"{summary.retried} to retry, {summary.failed} failed, {summary.cancelled} cancelled, "
        f"{summary.released} released"
    )
    if args.json:
        output.emit_json({**dataclasses.asdict(summary), "processed": summary.processed})
    elif args.log_format == "json":
        fields = {"event": "worker_stopped", **dataclasses.asdict(summary)}
        log.info(stopped, extra={"errands": fields})
    elif not args.quiet:
        print(stopped, file=sys.stderr)
    return RECYCLE_EXIT if summary.recycled else 0


def _supervise(args: argparse.Namespace, queue: Queue) -> int:
    """--processes P: the app was imported once here to check it; each child imports it
    afresh (spawned, never forked with an open connection)."""
    from ..worker.supervisor import Supervisor

    shutdown = queue.settings.shutdown_timeout
    queue.close()
    child = ["--app", args.app, "--concurrency", str(args.concurrency)]
    if args.queues:
        child += ["--queues", args.queues]
    if args.burst:
        child.append("--burst")
    if args.quiet:
        child.append("--quiet")
    if getattr(args, "db", None):
        child += ["--db", args.db]  # the check each child repeats must see what this one saw
    if args.verbose:
        child.append("--verbose")
    child += ["--log-format", args.log_format]
    worker_log.configure(quiet=args.quiet, verbose=args.verbose, fmt=args.log_format)
    return Supervisor(child, args.processes, shutdown, burst=args.burst).run()
