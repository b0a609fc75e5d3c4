"""Flow-control commands (docs/flow-control.md): pause, resume, queues, limits, fair, limit
set|clear."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from ..core import validate
from ..limits import MAX_CAP, parse_rate, unused_queue_warning, unused_queues
from . import jobs, output
from .common import cli_actor
from .ops import OK, USAGE, _add, _open


def register(subparsers: Any) -> None:
    p = _add(subparsers, "pause", "stop every worker claiming from a queue ('*': all)", _pause)
    p.add_argument(
        "queue", metavar="QUEUE", type=_queue, help="the queue to pause, or '*' for every queue"
    )
    p.add_argument("--reason", help="why (shown by queues, stats and the dashboard)")

    p = _add(subparsers, "resume", "let workers claim from a paused queue again", _resume)
    p.add_argument(
        "queue",
        metavar="QUEUE",
        type=_queue,
        help="the queue to resume, or '*': every pause",
    )

    p = _add(subparsers, "queues", "queues: paused or not (by whom, since, why), counts", _queues)
    p.add_argument("--json", action="store_true", help="print a JSON array")

    p = _add(subparsers, "limits", "limits: caps in force, running and waiting per group", _limits)
    p.add_argument("--json", action="store_true", help="print a JSON array")

    p = _add(subparsers, "fair", "fair share: per fair value, jobs due, running, served", _fair)
    p.add_argument(
        "--minutes",
        type=_minutes,
        default=5.0,
        help="count the starts of the last MINUTES (default 5)",
    )
    p.add_argument("--json", action="store_true", help="print a JSON array")

    p = subparsers.add_parser(
        "limit",
        help="set or clear a stored limit (wins over the code's until cleared)",
        description="set or clear a stored limit (wins over the code's until cleared)",
    )
    verbs = p.add_subparsers(dest="limit_command", metavar="set|clear", required=True)
    s = _add(verbs, "set", "store a limit for KEY", _limit_set)
    s.add_argument("key", metavar="KEY", help="the limit's key, as in errands.Limit(KEY, …)")
    s.add_argument("--running", type=jobs.int_between(0, MAX_CAP), help="at most N holding a lease")
    s.add_argument("--rate", type=_rate, help="at most N starts in any SECONDS (N/SECONDS)")
    c = _add(verbs, "clear", "drop the stored limit of KEY: the code's applies again", _clear)
    c.add_argument("key", metavar="KEY", help="the limit's key")


def _queue(text: str) -> str:
    """A queue name (or '*'), checked as the Queue checks it: bad usage, exit 2."""
    try:
        return text if text == "*" else validate.name(text, "queue")
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _rate(text: str) -> tuple[int, float]:
    try:
        return parse_rate(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _pause(args: argparse.Namespace) -> int:
    with _open(args) as q:
        q.pause(args.queue, reason=args.reason, actor=cli_actor())
        unused = unused_queues(q.reads, [args.queue], (), q.clock(), q.settings.lease_seconds)
    what = "every queue" if args.queue == "*" else f"queue {args.queue!r}"
    print(f"paused {what}: workers stop claiming from it at their next claim")
    if unused:
        print(f"errands: {unused_queue_warning(unused)}", file=sys.stderr)
    return OK


def _resume(args: argparse.Namespace) -> int:
    with _open(args) as q:
        resumed = q.resume(args.queue, actor=cli_actor())
    what = "every queue" if args.queue == "*" else f"queue {args.queue!r}"
    print(f"resumed {what}" if resumed else f"{what} was not paused")
    return OK


def _queues(args: argparse.Namespace) -> int:
    with _open(args) as q:
        infos = q.queues()
    if args.json:
        output.emit_json([i.to_dict() for i in infos])
        return OK
    now = time.time()
    rows = [
        (
            i.name,
            "paused" if i.paused else "active",
            i.counts.get("queued", 0),
            i.counts.get("running", 0),
            "-" if i.paused_at is None else f"{_age(now - i.paused_at)} ago",
            i.paused_by or "-",
            output.clip(i.reason, 60),
        )
        for i in infos
    ]
    output.table(["QUEUE", "STATE", "QUEUED", "RUNNING", "PAUSED", "BY", "REASON"], rows)
    return OK


def _limits(args: argparse.Namespace) -> int:
    with _open(args) as q:
        infos = q.limits()
    if args.json:
        output.emit_json([i.to_dict() for i in infos])
        return OK
    rows = []
    for i in infos:
        rate = "-" if i.rate is None else f"{i.rate[0]}/{i.rate[1]:g}s"
        cap = "-" if i.running is None else str(i.running)
        for group, c in sorted(i.groups.items()) or [("", {"running": 0, "waiting": 0})]:
            rows.append((i.key, group or "-", c["running"], cap, c["waiting"], rate, i.source))
    output.table(["KEY", "GROUP", "RUNNING", "MAX", "WAITING", "RATE", "SOURCE"], rows)
    return OK


def _minutes(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value <= 1440:
        raise argparse.ArgumentTypeError(
            f"--minutes must be over 0 and at most 1440, got {text!r:.40}"
        )
    return value


def _fair(args: argparse.Namespace) -> int:
    with _open(args) as q:
        infos = q.fairness(args.minutes)
    if args.json:
        output.emit_json([i.to_dict() for i in infos])
        return OK
    rows = [(i.key, i.value or "-", i.due, i.queued, i.running, i.served) for i in infos]
    served = f"SERVED {args.minutes:g}M"
    output.table(["KEY", "VALUE", "DUE", "QUEUED", "RUNNING", served], rows)
    return OK


def _limit_set(args: argparse.Namespace) -> int:
    if args.running is None and args.rate is None:  # bad usage: nothing opened
        print(
            f"errands: limit set {args.key!r:.60} caps nothing: give --running N, "
            "--rate N/SECONDS or both (e.g. errands limit set api --running 4)",
            file=sys.stderr,
        )
        return USAGE
    with _open(args) as q:
        q.set_limit(args.key, running=args.running, rate=args.rate, actor=cli_actor())
    print(json.dumps({"key": args.key, "running": args.running, "rate": args.rate}))
    return OK


def _clear(args: argparse.Namespace) -> int:
    with _open(args) as q:
        cleared = q.clear_limit(args.key, actor=cli_actor())
    print(f"cleared the stored limit of {args.key!r}" if cleared else f"{args.key!r} had none")
    return OK


def _age(seconds: float) -> str:
    seconds = max(0.0, seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:.0f}s"
