"""The operator's job edits and schedule switches (issue #25): ``errands delete ID…``,
``errands run-now ID…``, ``errands priority N ID…``, and the ``disable``/``enable``/``run``
actions of ``errands periodic`` (which ``cli.ops`` hands over).

Each job edit names every id it left alone and why (exit 1 when any was refused, so a script
notices); ``--json`` prints ``{"changed": [...], "refused": {"ID": "why"}}``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from ..client.bulk import BulkReport
from ..core import validate
from ..queue import Queue
from . import output
from .common import add_db, add_json, cli_actor, open_queue
from .jobs import int_between, job_id

OK, ACT = 0, 1


def register(sub: Any) -> None:
    p = sub.add_parser(
        "delete",
        help="delete jobs with their attempts and events (not running ones: cancel first)",
        description="Delete jobs by id, with their attempts and events: a deleted job leaves "
        "no event (the delete is logged). A running job is refused (cancel it first), and so "
        "is a job a waiting job depends on. A finished job's outcome stays in the hourly "
        "figures, as prune keeps it.",
    )
    p.add_argument("ids", nargs="+", type=job_id, metavar="ID", help="the jobs to delete")
    add_db(p)
    add_json(p)
    p.set_defaults(func=cmd_delete)

    p = sub.add_parser(
        "run-now",
        help="make scheduled jobs (or retries waiting out their backoff) due now",
        description="Make queued jobs whose run_at is still ahead due now (a RESCHEDULED "
        "event records the old and new run_at). Other jobs are refused, each with why.",
    )
    p.add_argument("ids", nargs="+", type=job_id, metavar="ID", help="the jobs to make due")
    add_db(p)
    add_json(p)
    p.set_defaults(func=cmd_run_now)

    p = sub.add_parser(
        "priority",
        help="give queued or waiting jobs a new priority (higher runs first)",
        description="Give queued or waiting jobs priority N (higher runs first; a "
        "PRIORITY_CHANGED event records the old and new). Running and finished jobs are "
        "refused.",
    )
    p.add_argument(
        "priority", type=int_between(*validate.PRIORITY_RANGE), metavar="N", help="the priority"
    )
    p.add_argument("ids", nargs="+", type=job_id, metavar="ID", help="the jobs to change")
    add_db(p)
    add_json(p)
    p.set_defaults(func=cmd_priority)


def _act(
    args: argparse.Namespace, act: Callable[[Queue], BulkReport], done: Callable[[int], str]
) -> int:
    with open_queue(args, must_exist=True) as q:
        report = act(q)
    if args.json:
        output.emit_json(
            {"changed": report.changed, "refused": {str(k): v for k, v in report.refused.items()}}
        )
    else:
        for changed in report.changed:
            print(done(changed))
        for refused, why in report.refused.items():
            output.error(f"job {refused}: {why}")
    return ACT if report.refused else OK


def cmd_delete(args: argparse.Namespace) -> int:
    return _act(
        args, lambda q: q.delete(*args.ids, actor=cli_actor()), lambda i: f"job {i}: deleted"
    )


def cmd_run_now(args: argparse.Namespace) -> int:
    return _act(
        args, lambda q: q.run_now(*args.ids, actor=cli_actor()), lambda i: f"job {i}: due now"
    )


def cmd_priority(args: argparse.Namespace) -> int:
    return _act(
        args,
        lambda q: q.set_priority(args.priority, *args.ids, actor=cli_actor()),
        lambda i: f"job {i}: priority {args.priority}",
    )


# -- errands periodic disable|enable|run NAME ---------------------------------------------------


def periodic_action(args: argparse.Namespace, q: Queue) -> int:
    name = args.name
    if args.action == "disable":
        changed = q.disable_periodic(name, actor=cli_actor())
        result = "disabled" if changed else "already_disabled"
        text = (
            f"disabled schedule {name!r}: no tick is enqueued until `errands periodic enable`"
            if changed
            else f"schedule {name!r} was already disabled"
        )
    elif args.action == "enable":
        changed = q.enable_periodic(name, actor=cli_actor())
        result = "enabled" if changed else "already_enabled"
        text = (
            f"enabled schedule {name!r}: its next tick is the first from now"
            if changed
            else f"schedule {name!r} was not disabled"
        )
    else:
        new_id = q.run_periodic(name, actor=cli_actor())
        if args.json:
            output.emit_json({"name": name, "result": "enqueued", "id": new_id})
        else:
            print(f"enqueued job {new_id} for schedule {name!r} (manual; its ticks unchanged)")
        return OK
    if args.json:
        output.emit_json({"name": name, "result": result})
    else:
        print(text)
    return OK
