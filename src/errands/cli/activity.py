"""``errands activity``: the operator activity log, newest first (docs/operations.md)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..client.activity import MAX_LIMIT
from . import output
from .common import add_json, open_queue
from .jobs import int_between
from .ops import _add

MAX_ID = 2**63 - 1


def register(subparsers: Any) -> None:
    help_text = "operator actions, newest first: who retried, deleted, paused, pruned… and when"
    p = _add(subparsers, "activity", help_text, cmd_activity)
    p.add_argument("--actor", help="only this actor's actions (e.g. cli:alice, or a token label)")
    p.add_argument("--action", help="only this action (retry, delete, pause, set_limit, prune…)")
    p.add_argument(
        "--limit",
        type=int_between(1, MAX_LIMIT),
        default=50,
        help=f"how many rows (default 50, at most {MAX_LIMIT})",
    )
    p.add_argument(
        "--before",
        type=int_between(1, MAX_ID),
        help="only rows older than this row id (the ID column: the next page)",
    )
    add_json(p)


def cmd_activity(args: argparse.Namespace) -> int:
    with open_queue(args, must_exist=True) as q:
        rows = q.activity(
            limit=args.limit, before=args.before, actor=args.actor, action=args.action
        )
    if args.json:
        output.emit_json([r.to_dict() for r in rows])
        return 0
    if not rows:
        print("no operator action recorded" + (" matches" if args.actor or args.action else ""))
        return 0
    output.table(
        ["ID", "TIME (UTC)", "ACTOR", "ACTION", "TARGET", "COUNT", "FILTER"],
        [
            (
                r.id,
                output.when(r.at),
                output.clip(r.actor, 32),
                r.action,
                output.clip(r.target or "", 40),
                r.count,
                "" if not r.filter else output.clip(json.dumps(r.filter), 60),
            )
            for r in rows
        ],
    )
    return 0
