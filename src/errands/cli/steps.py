"""Durable steps on the command line (docs/durable-steps.md): ``errands signal ID NAME
[--payload JSON]``, and the steps part of ``errands show``."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any, TextIO

from ..core.records import Step
from ..errors import InvalidTransitionError, JobNotFoundError
from . import output
from .common import UsageError, add_db, add_json, cli_actor, open_queue

PREVIEW = 60  # characters of a step's result shown by `errands show`


def register(sub: Any, job_id: Any) -> None:
    p = sub.add_parser(
        "signal",
        help="send a signal to a job (ctx.wait_for in its handler takes it)",
        description="Send signal NAME, with an optional JSON payload, to a job that is not "
        "finished. Signals are kept in order per job and name: the k-th ctx.wait_for(NAME) "
        "takes the k-th. A job parked waiting for it is queued at once.",
    )
    p.add_argument("id", type=job_id, metavar="ID", help="the job the signal goes to")
    p.add_argument("name", metavar="NAME", help="the signal's name")
    p.add_argument("--payload", metavar="JSON", help="any JSON value (default: null)")
    add_db(p)
    add_json(p)
    p.set_defaults(func=cmd_signal)


def parse_json(text: str | None) -> Any:
    if text is None:
        return None

    def refuse(name: str) -> Any:
        raise ValueError(f"{name} is not JSON (JSON has no NaN or Infinity)")

    try:
        return json.loads(text, parse_constant=refuse)
    except ValueError as exc:
        raise UsageError(
            f"--payload is not valid JSON ({exc}); pass JSON, e.g. --payload '{{\"score\": 9}}'"
        ) from None


def cmd_signal(args: argparse.Namespace) -> int:
    payload = parse_json(args.payload)
    with open_queue(args, must_exist=True) as q:
        try:
            q.signal(args.id, args.name, payload, actor=cli_actor(), by_hand=True)
        except (JobNotFoundError, InvalidTransitionError) as exc:
            output.error(str(exc))
            return 1
        except ValueError as exc:  # a name errands cannot store
            raise UsageError(str(exc)) from None
        job = q.get(args.id)
    status = None if job is None else job.status
    if args.json:
        output.emit_json({"id": args.id, "signal": args.name, "status": status})
    else:
        print(f"job {args.id}: signal {args.name!r} sent (job is {status})")
    return 0


def steps_table(steps: Sequence[Step], out: TextIO | None = None) -> None:
    """Name, attempt, duration and a preview of each step's result; the sleep or wait in
    progress says what it waits for."""
    rows = []
    for s in steps:
        took = "-"
        if s.finished_at and s.started_at and s.kind == "step":
            took = f"{(s.finished_at - s.started_at).total_seconds():.3f}s"
        if s.kind == "sleep":
            shown = f"until {output.when(s.wake_at)}"
        elif s.kind == "wait" and s.finished_at is None:
            limit = f", timeout {output.when(s.wake_at)}" if s.wake_at else ""
            shown = f"waiting for a signal{limit}"
        else:
            shown = json.dumps(s.result, ensure_ascii=False)
        rows.append(
            (s.seq, s.kind, output.clip(s.name, 40), s.attempt, took, output.clip(shown, PREVIEW))
        )
    output.table(["#", "KIND", "NAME", "ATTEMPT", "TOOK", "RESULT"], rows, out)
