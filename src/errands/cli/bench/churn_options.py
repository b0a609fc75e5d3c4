"""The options of ``errands bench --long-transaction`` (churn.py), and the command's run."""

from __future__ import annotations

import argparse

from ..common import UsageError, duration

DEFAULT_PHASE = 60.0
DEFAULT_HOLD = 600.0  # ten minutes: long enough for a claim that pays for dead tuples to show it
DEFAULT_SAMPLE = 10.0


def fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number; give e.g. 0.5") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"{text} is not in (0, 1]; give e.g. 0.5 for half")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of jobs/s") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text} jobs/s: give a rate above 0")
    return value


def add_churn_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--long-transaction",
        action="store_true",
        help="run only the PostgreSQL churn phase: steady one-by-one enqueues to one worker "
        "process through normal / held (a REPEATABLE READ transaction open on another "
        "connection) / released phases, reporting throughput, pickup lag p50/p99, dead tuples "
        "and table growth per sample and per phase (needs --db postgresql://…)",
    )
    p.add_argument(
        "--load",
        type=fraction,
        default=0.5,
        metavar="FRACTION",
        help="with --long-transaction: the offered load as a fraction of the capacity one "
        "worker process measured first on --jobs jobs (default 0.5)",
    )
    p.add_argument(
        "--rate",
        type=positive_float,
        metavar="JOBS_PER_S",
        help="with --long-transaction: offer this many jobs/s instead of --load of capacity",
    )
    p.add_argument(
        "--phase",
        type=duration,
        default=DEFAULT_PHASE,
        metavar="DURATION",
        help="with --long-transaction: length of the normal and the released phase (default 60s)",
    )
    p.add_argument(
        "--hold",
        type=duration,
        default=DEFAULT_HOLD,
        metavar="DURATION",
        help="with --long-transaction: how long the transaction is held (default 10m)",
    )
    p.add_argument(
        "--sample",
        type=duration,
        default=DEFAULT_SAMPLE,
        metavar="DURATION",
        help="with --long-transaction: the sampling window (default 10s)",
    )


def run_churn(args: argparse.Namespace, url: str | None) -> int:
    from .. import output
    from .churn import ChurnSettings, measure_churn, report_churn

    if not url:
        raise UsageError(
            "--long-transaction measures PostgreSQL's dead tuples; give --db postgresql://…"
        )
    settings = ChurnSettings(
        jobs=args.jobs,
        load=args.load,
        rate=args.rate,
        phase_seconds=args.phase,
        hold_seconds=args.hold,
        sample_seconds=args.sample,
        concurrency=args.concurrency,
    )
    result = measure_churn(url, settings, args.dir)
    if args.json:
        output.emit_json(result)
    else:
        report_churn(result)
    return 0
