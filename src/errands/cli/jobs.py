"""Commands that read and change jobs: enqueue, jobs, show, retry, cancel, stats."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from ..core import validate
from ..core.options import NAMES as OPTION_NAMES
from ..core.options import EnqueueOptions
from ..core.states import State
from ..errors import ConfigurationError, ErrandsError, InvalidTransitionError, JobNotFoundError
from ..tasks import DEFAULT_MAX_ATTEMPTS
from . import deps, output, steps
from .common import UsageError, add_db, add_json, cli_actor, duration, open_queue

STATES = [s.value for s in State]
ACTOR = "cli"


def int_between(lo: int, hi: int) -> Callable[[str], int]:
    """An argparse type: a whole number within [lo, hi] (bad usage, exit 2, otherwise)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r:.40} is not a whole number") from None
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"must be between {lo} and {hi}, got {text:.40}")
        return value

    parse.__name__ = "whole number"  # argparse names the type in its messages
    return parse


def filter_of(what: str) -> Callable[[str], str]:
    """An argparse type for ``--type``/``--queue``/``--error-code``: the filters' one rule
    (``validate.filter_text``), so bytes that are not UTF-8 are bad usage (exit 2)."""

    def parse(text: str) -> str:
        try:
            return validate.filter_text(text, what) or text
        except ErrandsError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parse.__name__ = f"{what} filter"
    return parse


positive_int = int_between(1, validate.INT64_MAX)
job_id = int_between(1, validate.INT64_MAX)


def register(sub: Any) -> None:
    p = sub.add_parser(
        "enqueue",
        help="store one job (prints its id)",
        description="Store one job and print its id. The job runs when a worker that has a "
        "handler for TYPE is running.",
    )
    p.add_argument("type", metavar="TYPE", help="the task name (the handler's function name)")
    p.add_argument(
        "--payload", metavar="JSON", help='keyword arguments as a JSON object: \'{"to": "a@b.c"}\''
    )
    p.add_argument(
        "--delay",
        type=duration,
        metavar="DURATION",
        help="run no sooner than this from now: seconds or a number with s/m/h/d/w, e.g. 30m",
    )
    p.add_argument(
        "--run-at",
        metavar="TIME",
        help="run no sooner than this time: ISO 8601 with its UTC offset "
        "(2026-12-01T09:00:00+00:00) or unix seconds; not with --delay",
    )
    p.add_argument(
        "--priority",
        type=int_between(*validate.PRIORITY_RANGE),
        metavar="N",
        help="higher runs first (default 0)",
    )
    p.add_argument("--queue", metavar="Q", help="queue name (default 'default')")
    p.add_argument(
        "--max-attempts",
        type=int_between(1, validate.MAX_ATTEMPTS_MAX),
        metavar="N",
        help=f"attempts before it fails (default {DEFAULT_MAX_ATTEMPTS})",
    )
    p.add_argument(
        "--unique-key", metavar="K", help="if a queued or running job holds K, print its id instead"
    )
    p.add_argument(
        "--unique-for",
        type=duration,
        metavar="DURATION",
        help="with --unique-key: K stays taken this long after its job succeeded (e.g. 1h)",
    )
    p.add_argument(
        "--debounce",
        type=duration,
        metavar="DURATION",
        help="with --unique-key: one queued job per key, this payload replacing its payload, run "
        "this long after the latest enqueue",
    )
    p.add_argument(
        "--max-wait",
        type=duration,
        metavar="DURATION",
        help="with --debounce: but no later than this after the key's first enqueue",
    )
    p.add_argument(
        "--expires-in",
        type=duration,
        metavar="DURATION",
        help="not started this long after it is due: cancelled (EXPIRED:QUEUE) without running",
    )
    p.add_argument(
        "--deadline",
        type=duration,
        metavar="DURATION",
        help="no attempt starts this long after the enqueue: failed (DEADLINE:EXCEEDED)",
    )
    p.add_argument(
        "--after",
        type=id_list,
        metavar="ID[,ID…]",
        help="run once these jobs are final (docs/pipelines.md); unknown ids are refused",
    )
    p.add_argument(
        "--on-upstream-failure",
        choices=validate.ON_UPSTREAM_FAILURE,
        help="with --after: cancel it if one of them did not succeed (default), or run anyway",
    )
    p.add_argument(
        "--create",
        action="store_true",
        help="create the SQLite database if it does not exist (otherwise a missing file is an "
        "error: a job in a new file would be seen by no worker)",
    )
    add_db(p)
    add_json(p)
    p.set_defaults(func=cmd_enqueue)

    p = sub.add_parser(
        "jobs",
        help="list jobs, newest first",
        description="List jobs, newest first. --json prints every jobs column of each job.",
    )
    p.add_argument("--status", choices=STATES, help="only jobs in this state")
    p.add_argument("--type", type=filter_of("type"), metavar="T", help="only jobs of this type")
    p.add_argument("--queue", type=filter_of("queue"), metavar="Q", help="only jobs in this queue")
    p.add_argument(
        "--error-code",
        type=filter_of("error_code"),
        metavar="C",
        help="only jobs whose last error code is C",
    )
    p.add_argument(
        "--limit", type=positive_int, default=100, metavar="N", help="at most N jobs (default 100)"
    )
    add_db(p)
    add_json(p)
    p.set_defaults(func=cmd_jobs)

    p = sub.add_parser(
        "show",
        help="one job: its columns, attempts, steps and event timeline",
        description="Show one job, its attempts, its durable steps and its event timeline.",
    )
    p.add_argument("id", type=job_id, metavar="ID", help="the job to show")
    p.add_argument(
        "--tracebacks", action="store_true", help="also print each failed attempt's traceback"
    )
    add_db(p)
    add_json(p)
    p.set_defaults(func=cmd_show)


def id_list(text: str) -> list[int]:
    """``--after 3,4``: job ids, comma-separated."""
    try:
        return [job_id(part) for part in text.split(",")]
    except (argparse.ArgumentTypeError, ValueError):
        raise argparse.ArgumentTypeError(
            f"expected job ids separated by commas (e.g. 3,4), got {text!r}"
        ) from None


def parse_payload(text: str | None) -> Any:
    if text is None:
        return {}

    def refuse(name: str) -> Any:
        raise ValueError(f"{name} is not JSON (JSON has no NaN or Infinity)")

    example = '--payload \'{"to": "a@example.com"}\''
    try:
        value = json.loads(text, parse_constant=refuse)
    except ValueError as exc:
        raise UsageError(
            f"--payload is not valid JSON ({exc}); pass a JSON object, e.g. {example}"
        ) from None
    if not isinstance(value, dict):
        # Handlers take keyword arguments: a worker would fail it as INVALID_INPUT:PAYLOAD.
        kinds = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
        kind = kinds.get(type(value), "a number")
        raise UsageError(
            f"--payload is {kind}, but a job's payload is the handler's keyword arguments: "
            f"pass a JSON object, e.g. {example}"
        )
    return value


def cmd_enqueue(args: argparse.Namespace) -> int:
    payload = parse_payload(args.payload)
    with open_queue(args, must_exist=not args.create) as q:
        try:
            # Every enqueue option is a flag of the same name (a test holds it).
            given = {n: getattr(args, n) for n in OPTION_NAMES if getattr(args, n) is not None}
            options = EnqueueOptions.of_json(given, "errands enqueue")
            # By hand, so an operator action, logged with the job (an application's own
            # enqueues are its work).
            new_id = q.enqueue(args.type, payload, options=options, actor=cli_actor(), by_hand=True)
        except ConfigurationError as exc:  # an option errands cannot take: bad usage
            raise UsageError(str(exc)) from None
    if args.json:
        output.emit_json({"id": new_id})
    else:
        print(new_id)
    return 0


def cmd_jobs(args: argparse.Namespace) -> int:
    with open_queue(args, must_exist=True) as q:
        jobs = q.jobs(
            status=args.status,
            type=args.type,
            queue=args.queue,
            error_code=args.error_code,
            limit=args.limit,
        )
    if args.json:
        output.emit_json([j.to_dict() for j in jobs])
    elif not jobs:
        print("no jobs match")
    else:
        output.jobs_table(jobs)
        if len(jobs) == args.limit:
            print(f"(first {args.limit}; raise --limit or filter to see more)")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    with open_queue(args, must_exist=True) as q:
        job = q.get(args.id)
        if job is None:
            raise JobNotFoundError(f"no job with id {args.id}; list jobs with `errands jobs`")
        attempts = q.attempts(job.id)
        events = q.events(job.id)
        tracebacks = {a.attempt: q.traceback(a) for a in attempts} if args.tracebacks else {}
        around = q.graph(job.id)
        recorded = q.steps(job.id)
    if args.json:
        output.emit_json(
            {
                "job": job.to_dict(),
                "attempts": [a.to_dict() for a in attempts],
                "events": [e.to_dict() for e in events],
                "deps": around,
                "steps": [s.to_dict() for s in recorded],
            }
        )
        return 0
    output.job_detail(job)
    for line in deps.lines(around):
        print(line)
    print()
    print(f"Attempts ({len(attempts)})")
    if attempts:
        output.attempts_table(attempts)
    if recorded:  # durable steps (docs/durable-steps.md)
        print()
        print(f"Steps ({len(recorded)})")
        steps.steps_table(recorded)
    print()
    print(f"Events ({len(events)})")
    output.events_table(events, job.created_at)
    for number, text in tracebacks.items():
        if text:
            print(f"\nTraceback of attempt {number}:\n{text.rstrip()}")
    return 0


def cmd_retry(args: argparse.Namespace) -> int:
    """``errands retry ID…`` (bulk ``--status`` is handled in cli.ops)."""
    problems = 0
    with open_queue(args, must_exist=True) as q:
        for job_id in args.ids:
            try:
                q.retry(job_id, actor=cli_actor(), reset_steps=args.reset_steps)
            except (JobNotFoundError, InvalidTransitionError) as exc:
                problems += 1
                output.error(str(exc))
            else:
                reset = " from its first step" if args.reset_steps else ""
                print(f"job {job_id}: queued to run again{reset}")
    return 1 if problems else 0


def cmd_cancel(args: argparse.Namespace) -> int:
    problems = 0
    with open_queue(args, must_exist=True) as q:
        for job_id in args.ids:
            try:
                what = q.cancel(job_id, actor=cli_actor())
            except (JobNotFoundError, InvalidTransitionError) as exc:
                problems += 1
                output.error(str(exc))
                continue
            if what == "cancelled":
                print(f"job {job_id}: cancelled")
            else:
                print(f"job {job_id}: running; asked to stop (cancel requested)")
    return 1 if problems else 0
