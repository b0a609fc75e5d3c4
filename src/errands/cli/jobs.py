"""Commands that read and change jobs: enqueue, jobs, show, retry, cancel, stats."""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

from ..errors import InvalidTransitionError, JobNotFoundError
from ..queue import Queue
from ..states import State
from . import output
from .common import CommandFailed, UsageError, add_db, add_json, open_queue

STATES = [s.value for s in State]
ACTOR = "cli"


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0 seconds, got {text}")
    return value


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
        "--delay", type=seconds, metavar="S", help="run no sooner than S seconds from now"
    )
    p.add_argument("--priority", type=int, metavar="N", help="higher runs first (default 0)")
    p.add_argument("--queue", metavar="Q", help="queue name (default 'default')")
    p.add_argument(
        "--max-attempts",
        type=positive_int,
        metavar="N",
        help="attempts before it fails (default 20)",
    )
    p.add_argument(
        "--unique-key", metavar="K", help="if a queued or running job holds K, print its id instead"
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
    p.add_argument("--type", metavar="T", help="only jobs of this task type")
    p.add_argument("--queue", metavar="Q", help="only jobs in this queue")
    p.add_argument("--error-code", metavar="C", help="only jobs whose last error code is C")
    p.add_argument(
        "--limit", type=positive_int, default=100, metavar="N", help="at most N jobs (default 100)"
    )
    add_db(p)
    add_json(p)
    p.set_defaults(func=cmd_jobs)

    p = sub.add_parser(
        "show",
        help="one job: its columns, attempts and event timeline",
        description="Show one job, its attempts and its event timeline.",
    )
    p.add_argument("id", type=int, metavar="ID")
    p.add_argument(
        "--tracebacks", action="store_true", help="also print each failed attempt's traceback"
    )
    add_db(p)
    add_json(p)
    p.set_defaults(func=cmd_show)

    p = sub.add_parser(
        "retry",
        help="run failed or cancelled jobs again",
        description="Run failed or cancelled jobs again now, with at least one more attempt. "
        "Give ids, or --status failed|cancelled (optionally --type) for every such job.",
    )
    p.add_argument("ids", type=int, nargs="*", metavar="ID")
    p.add_argument(
        "--status", choices=["failed", "cancelled"], help="retry every job in this state"
    )
    p.add_argument("--type", metavar="T", help="with --status: only jobs of this type")
    add_db(p)
    p.set_defaults(func=cmd_retry)

    p = sub.add_parser(
        "cancel",
        help="cancel queued jobs (running ones are asked to stop)",
        description="Cancel queued jobs. A running job is flagged cancel_requested: its handler "
        "sees ctx.cancelled (async handlers are cancelled).",
    )
    p.add_argument("ids", type=int, nargs="+", metavar="ID")
    add_db(p)
    p.set_defaults(func=cmd_cancel)

    p = sub.add_parser(
        "stats",
        help="counts per state, queue and type",
        description="Counts per state, and per queue and type. --json: an object whose 'counts' "
        "maps every state to its total.",
    )
    add_db(p)
    add_json(p)
    p.set_defaults(func=cmd_stats)


def parse_payload(text: str | None) -> Any:
    if text is None:
        return {}

    def refuse(name: str) -> Any:
        raise ValueError(f"{name} is not JSON (JSON has no NaN or Infinity)")

    try:
        return json.loads(text, parse_constant=refuse)
    except ValueError as exc:
        raise UsageError(
            f"--payload is not valid JSON ({exc}); pass a JSON object, e.g. "
            '--payload \'{"to": "a@example.com"}\''
        ) from None


def cmd_enqueue(args: argparse.Namespace) -> int:
    payload = parse_payload(args.payload)
    with open_queue(args, must_exist=False) as q:
        job_id = q.enqueue(
            args.type,
            payload,
            queue=args.queue,
            priority=args.priority,
            delay=args.delay,
            max_attempts=args.max_attempts,
            unique_key=args.unique_key,
            actor="cli",
        )
    if args.json:
        output.emit_json({"id": job_id})
    else:
        print(job_id)
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
    if args.json:
        output.emit_json(
            {
                "job": job.to_dict(),
                "attempts": [a.to_dict() for a in attempts],
                "events": [e.to_dict() for e in events],
            }
        )
        return 0
    output.job_detail(job)
    print()
    print(f"Attempts ({len(attempts)})")
    if attempts:
        output.attempts_table(attempts)
    print()
    print(f"Events ({len(events)})")
    output.events_table(events, job.created_at)
    for number, text in tracebacks.items():
        if text:
            print(f"\nTraceback of attempt {number}:\n{text.rstrip()}")
    return 0


def _ids_in_state(q: Queue, status: str, job_type: str | None) -> list[int]:
    ids: list[int] = []
    before: int | None = None
    while True:
        page = q.jobs(status=status, type=job_type, limit=500, before_id=before)
        ids.extend(j.id for j in page)
        if len(page) < 500:
            return ids
        before = page[-1].id


def cmd_retry(args: argparse.Namespace) -> int:
    if args.ids and args.status:
        raise UsageError("give job ids or --status, not both")
    if not args.ids and not args.status:
        raise UsageError("give job ids to retry, or --status failed|cancelled")
    if args.type and not args.status:
        raise UsageError("--type only goes with --status")
    problems = 0
    with open_queue(args, must_exist=True) as q:
        ids = args.ids or _ids_in_state(q, args.status, args.type)
        for job_id in ids:
            try:
                q.retry(job_id, actor=ACTOR)
            except (JobNotFoundError, InvalidTransitionError) as exc:
                problems += 1
                output.error(str(exc))
            else:
                print(f"job {job_id}: queued to run again")
    if args.status and not ids:
        print(f"no {args.status} jobs" + (f" of type {args.type}" if args.type else ""))
    return 1 if problems else 0


def cmd_cancel(args: argparse.Namespace) -> int:
    problems = 0
    with open_queue(args, must_exist=True) as q:
        for job_id in args.ids:
            try:
                what = q.cancel(job_id, actor=ACTOR)
            except (JobNotFoundError, InvalidTransitionError) as exc:
                problems += 1
                output.error(str(exc))
                continue
            if what == "cancelled":
                print(f"job {job_id}: cancelled")
            else:
                print(f"job {job_id}: running; asked to stop (cancel requested)")
    return 1 if problems else 0


def cmd_stats(args: argparse.Namespace) -> int:
    with open_queue(args, must_exist=True) as q:
        stats = q.stats()
    if args.json:
        output.emit_json(stats)
        return 0
    counts: dict[str, int] = stats["counts"]
    print("Jobs per state")
    output.table(["STATE", "JOBS"], [(s, counts.get(s, 0)) for s in STATES])
    pivot: dict[tuple[str, str], dict[str, int]] = {}
    for row in stats["by_queue_type"]:
        pivot.setdefault((row["queue"], row["type"]), {})[row["status"]] = row["count"]
    if pivot:
        print()
        print("Per queue and type")
        output.table(
            ["QUEUE", "TYPE", *(s.upper() for s in STATES)],
            [(qn, t, *(by.get(s, 0) for s in STATES)) for (qn, t), by in sorted(pivot.items())],
        )
    return 0


__all__ = ["CommandFailed", "register"]
