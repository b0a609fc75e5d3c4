"""The ``errands`` command line.

Exit status: 0 success; 1 a failure the user must act on (job not found, a change the job's
state does not allow, a database problem), printed as one line ``errands: <message>``; 2 bad
usage (argparse's own errors, a --payload that is not JSON, contradictory options).
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import sys
from collections.abc import Sequence
from typing import Any

from .. import __version__
from ..backends import scrub
from ..errors import ErrandsError
from . import actions, activity, dashboard, deps, flow, graduate, jobs, ops, output, steps, worker
from .bench.churn_options import add_churn_arguments, run_churn
from .common import UsageError, add_db, add_json, duration
from .jobs import int_between, positive_int

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
MAX_BENCH_ROUNDS = 100  # a bound that catches a typo before hours of benching


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse's own usage errors: exit 2, as documented
        self.print_usage(sys.stderr)
        output.error(message + _suggestion(self, message))
        raise SystemExit(EXIT_USAGE)


def _suggestion(parser: argparse.ArgumentParser, message: str) -> str:
    """For a misspelled command, the closest one (Python 3.14's argparse does this itself)."""
    match = re.search(r"invalid choice: '([^']*)'", message)
    if not match:
        return ""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            close = difflib.get_close_matches(match.group(1), list(action.choices), n=1)
            if close:
                return f"; did you mean '{close[0]}'?"
    return ""


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="errands",
        description="errands: a durable, observable job queue in one SQLite file or PostgreSQL. "
        "Run `errands demo` to see it work, `errands COMMAND --help` for a command's options.",
        epilog="Exit status: 0 ok, 1 a failure to act on (printed as 'errands: …'), 2 bad usage.",
    )
    parser.add_argument("--version", action="version", version=f"errands {__version__}")
    add_db(parser, top_level=True)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    worker.register(sub)
    jobs.register(sub)
    actions.register(sub)
    deps.register(sub, jobs.job_id)
    steps.register(sub, jobs.job_id)
    ops.register(sub)
    flow.register(sub)
    activity.register(sub)
    graduate.register(sub)
    dashboard.register(sub)
    _register_tools(sub)
    return parser


def _register_tools(sub: Any) -> None:
    p = sub.add_parser(
        "demo",
        help="run a self-contained demo on a fresh SQLite file",
        description="Create a fresh demo database (replaced on each run), register sample tasks "
        "(fast, flaky, always-failing, async, scheduled), enqueue a few hundred jobs, run a "
        "worker, and print what happened plus commands to explore further. No server needed.",
    )
    p.add_argument(
        "--db",
        default=argparse.SUPPRESS,
        metavar="PATH",
        help="demo database file, replaced on each run (default: errands-demo.db; "
        "$ERRANDS_DB is ignored so the demo never replaces your real database)",
    )
    p.add_argument(
        "--jobs",
        type=positive_int,
        default=300,
        metavar="N",
        help="roughly how many jobs (default 300)",
    )
    p.add_argument(
        "--no-dashboard",
        dest="dashboard",
        action="store_false",
        help="do not start the web dashboard (default: start it on 127.0.0.1 and print its URL; "
        "from a terminal it stays up with a worker until Ctrl-C)",
    )
    p.add_argument(
        "--port",
        type=int,
        default=8000,
        metavar="N",
        help="dashboard port (default 8000, else any free one)",
    )
    p.set_defaults(func=_cmd_demo)

    p = sub.add_parser(
        "bench",
        help="measure errands against the bare database on this machine",
        description="Each phase on a fresh database (temporary SQLite files, or fresh schemas in "
        "the PostgreSQL database of --db, dropped afterwards): raw driver baselines (single "
        "insert, the same with its audit row, bulk insert, batched processing with audit "
        "rows by 1 and by P processes), "
        "enqueue one by one and enqueue_many, processing with 1 and P real `errands worker` "
        "processes, pickup latency from a producer process to an idle worker process, and that "
        "worker's idle CPU; each errands figure also as a ratio to the raw baseline doing the "
        "same work with as many processes, and P processes / 1 (scaling) for both. The "
        "throughput phases run in --rounds rounds, each errands phase right after its own raw "
        "baseline, because a shared host is noisy: a pair sees the same moment of the host, "
        "and each ratio reported is the median over rounds of those paired ratios (jobs/s: "
        "the best round, and the spread of the rounds). Progress goes to stderr.",
    )
    p.add_argument(
        "--db",
        default=argparse.SUPPRESS,
        metavar="URL",
        help="postgresql://… to bench PostgreSQL (in fresh schemas, dropped afterwards); "
        "default: temporary SQLite files ($ERRANDS_DB is ignored)",
    )
    p.add_argument(
        "--jobs",
        type=positive_int,
        default=10000,
        metavar="N",
        help="jobs per phase (default 10000)",
    )
    p.add_argument(
        "--rounds",
        type=int_between(1, MAX_BENCH_ROUNDS),
        default=3,
        metavar="R",
        help="rounds of the throughput phases, each errands phase paired with its raw baseline; "
        f"the ratio is the median of the R paired ratios (default 3, 1 to {MAX_BENCH_ROUNDS})",
    )
    p.add_argument(
        "--processes",
        type=positive_int,
        default=2,
        metavar="P",
        help="worker processes for the multi-process phase (default 2)",
    )
    p.add_argument(
        "--concurrency",
        type=positive_int,
        default=8,
        metavar="C",
        help="concurrency of each worker process (default 8)",
    )
    p.add_argument(
        "--durability",
        choices=["full", "normal"],
        default="full",
        help="full (default: SQLite synchronous=FULL) or normal",
    )
    p.add_argument(
        "--latency-jobs",
        type=positive_int,
        default=200,
        metavar="N",
        help="jobs timed one at a time for pickup latency (default 200)",
    )
    p.add_argument(
        "--idle-seconds",
        type=duration,
        default=5.0,
        metavar="DURATION",
        help="how long the idle worker's CPU is measured (default 5s)",
    )
    p.add_argument(
        "--dir",
        metavar="PATH",
        help="where to put the temporary SQLite files (default: the system temp dir)",
    )
    p.add_argument(
        "--limits",
        action="store_true",
        help="run only the flow-control phase: unlimited jobs beside 10,000 waiting on a "
        "saturated limit, against the same run without them, and a capped key's rate",
    )
    p.add_argument(
        "--fairness",
        action="store_true",
        help="run only the fair-share phase: no-op jobs over 1,000 fair values, all due, "
        "against the same jobs without fair",
    )
    p.add_argument(
        "--steps",
        action="store_true",
        help="run only the durable-steps phase: no-op jobs against the same jobs recording "
        "three steps, and against the same run beside 10,000 sleeping or signal-waiting jobs",
    )
    add_churn_arguments(p)
    add_json(p)
    p.set_defaults(func=_cmd_bench)


def _cmd_demo(args: argparse.Namespace) -> int:
    from .demo import DEMO_DB, run_demo

    # Only an explicit --db: $ERRANDS_DB may name the user's real database, which the demo
    # would replace.
    return run_demo(
        getattr(args, "db", None) or DEMO_DB,
        jobs=args.jobs,
        dashboard=args.dashboard,
        port=args.port,
    )


def _cmd_bench(args: argparse.Namespace) -> int:
    from .bench import run_bench

    url = getattr(args, "db", None)
    if url and not url.startswith(("postgresql://", "postgres://")):
        raise UsageError(
            f"--db {url!r} is not a postgresql:// URL; the SQLite bench uses fresh temporary "
            "files (choose where with --dir)"
        )
    if args.fairness:
        from .bench.fairness import measure_fairness, report_fairness

        fair = measure_fairness(
            url=url,
            jobs=args.jobs,
            rounds=args.rounds,
            concurrency=args.concurrency,
            durability=args.durability,
            directory=args.dir,
        )
        if args.json:
            output.emit_json(fair)
        else:
            report_fairness(fair)
        return EXIT_OK
    if args.long_transaction:
        return run_churn(args, url)
    if args.limits:
        from .bench.limits import measure_limits, report_limits

        result = measure_limits(
            url=url,
            jobs=args.jobs,
            rounds=args.rounds,
            concurrency=args.concurrency,
            durability=args.durability,
            directory=args.dir,
        )
        if args.json:
            output.emit_json(result)
        else:
            report_limits(result)
        return EXIT_OK
    if args.steps:
        from .bench.steps import measure_steps, report_steps

        steps = measure_steps(
            url=url,
            jobs=args.jobs,
            rounds=args.rounds,
            concurrency=args.concurrency,
            durability=args.durability,
            directory=args.dir,
        )
        if args.json:
            output.emit_json(steps)
        else:
            report_steps(steps)
        return EXIT_OK
    return run_bench(
        url=url,
        jobs=args.jobs,
        rounds=args.rounds,
        processes=args.processes,
        idle_seconds=args.idle_seconds,
        concurrency=args.concurrency,
        durability=args.durability,
        latency_jobs=args.latency_jobs,
        directory=args.dir,
        as_json=args.json,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    # Messages name databases through backends.redact already; this is the last net, so a
    # password never reaches the terminal even inside a driver's own words.
    urls = (getattr(args, "db", None), os.environ.get("ERRANDS_DB"), getattr(args, "to", None))
    try:
        code: int = args.func(args)
    except UsageError as exc:
        output.error(scrub(str(exc), *urls))
        return EXIT_USAGE
    except ErrandsError as exc:
        output.error(scrub(str(exc), *urls))
        return EXIT_FAILED
    except BrokenPipeError:
        # `errands jobs | head`: the reader left; say nothing more (Python docs' recipe).
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_FAILED
    except OSError as exc:
        output.error(scrub(f"{exc}; check the path and its permissions", *urls))
        return EXIT_FAILED
    except KeyboardInterrupt:
        output.error("interrupted")
        return 130
    return code


__all__ = ["main"]
