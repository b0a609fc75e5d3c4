"""errands check: the health probe for cron, Kubernetes and monitoring — one line per
problem and exit 1, warnings on stderr (docs/operations.md). ``ops.register`` adds the command.
"""

from __future__ import annotations

import argparse
import json
import sys

from .. import horizon, order
from .. import reports as stats
from ..core import validate
from ..core.steps import WAIT_GRACE
from ..queue import Queue
from ..reports import describe_all
from . import jobs, output
from .common import duration, open_queue

OK, ACT = 0, 1


def add_horizon_limits(p: argparse.ArgumentParser) -> None:
    """check's PostgreSQL limits: dead tuples per table, and how long (or how many
    transactions back) anything may hold the xmin horizon (errands.horizon)."""
    p.add_argument(
        "--max-dead-tuples",
        type=jobs.int_between(0, validate.INT64_MAX),
        default=horizon.DEAD_TUPLES_MAX,
        help="dead tuples one of errands' tables may hold (PostgreSQL)",
    )
    p.add_argument(
        "--max-horizon-age",
        type=duration,
        default=horizon.HORIZON_AGE_MAX,
        help="how long a transaction may hold the xmin horizon (PostgreSQL)",
    )
    p.add_argument(
        "--max-horizon-xids",
        type=jobs.int_between(0, validate.INT64_MAX),
        default=horizon.HORIZON_XIDS_MAX,
        help="how many transactions back a slot or transaction may hold it (PostgreSQL)",
    )


def check_warnings(q: Queue) -> list[str]:
    """What ``check`` reports without failing: queued jobs of types no process has declared
    (they took the defaults: queue, priority, max_attempts; errands.client.declared)."""
    declared = {r.type for r in q.reads.task_types()}
    return [
        f"{n:,} queued {queue}/{jtype} job(s) of a type no worker has declared: they took the "
        "default options (queue 'default', priority 0, 20 attempts); start a worker whose app "
        f"has @q.task for {jtype!r}, or pass the options when enqueueing"
        for queue, jtype, n in q.reads.queued_types()
        if jtype not in declared
    ]


def check_problems(q: Queue, args: argparse.Namespace) -> list[str]:
    now = q.clock()
    b = q.reads
    graduated = b.graduation()
    if graduated is not None:
        # Its schedules and jobs live on there now: nothing here is overdue or stuck.
        return [
            f"this queue was graduated to {graduated.target}: check that database instead "
            f"(errands check --db {graduated.target}); reopen this file only deliberately "
            "(errands reopen)"
        ]
    problems = []
    late = b.running_past_lease(now, args.lease_grace)
    if late:
        problems.append(
            f"{late} job(s) running more than {output.age(args.lease_grace)} past their lease: "
            "is a worker (rescuer) running?"
        )
    workers = b.live_workers(now, q.settings.lease_seconds)
    for p in describe_all(b.list_periodic(), workers, now):
        if p["overdue"]:
            problems.append(f"periodic {p['name']!r} overdue: {p['overdue_reason']}")
    due = b.oldest_due(now)
    if due is not None and due["wait_seconds"] > args.max_wait:
        problems.append(
            f"oldest due job #{due['id']} ({due['type']}) has waited "
            f"{output.age(due['wait_seconds'])}, over --max-wait {output.age(args.max_wait)}"
        )
    for queue, jtype, n in b.queued_types():
        if not any(stats.handles(w, queue, jtype) for w in workers):
            problems.append(
                f"{n:,} queued {queue}/{jtype} job(s) but no live worker handles type {jtype!r}: "
                "start a worker whose app has that task (or is the type misspelled?)"
            )
    wal = stats.wal(b, now, q.settings.lease_seconds)["warning"]
    if wal:
        problems.append(wal)
    stuck = b.unreleased(1000)
    if stuck:
        problems.append(
            f"{stuck:,} waiting job(s) (or open edges) whose upstream jobs are all final: a "
            "release was missed; a worker's `deps` maintenance service repairs it (see "
            "docs/pipelines.md), and please report it"
        )
    late_waits = b.durable_counts(now, WAIT_GRACE)["waits_past_timeout"]
    if late_waits:
        problems.append(
            f"{late_waits:,} job(s) parked in ctx.wait_for more than {output.age(WAIT_GRACE)} past "
            "their timeout: is a worker (its rescue service) running? (docs/durable-steps.md)"
        )
    hour = stats.last_hour(b, now)
    if hour["processed"] >= args.min_finished and hour["failure_rate"] > args.max_failure_rate:
        problems.append(
            f"failure rate {hour['failure_rate']:.1%} in the last hour "
            f"({hour['failed']:,} of {hour['processed']:,}) is over "
            f"--max-failure-rate {args.max_failure_rate:.1%}"
        )
    looping = b.snoozing_jobs(args.snooze_loop, 5)
    if looping:
        which = ", ".join(f"#{r['id']} ({r['type']}, {r['attempts']:,} starts)" for r in looping)
        problems.append(
            f"job(s) snoozing in a loop: {which} — over --snooze-loop {args.snooze_loop:,}; "
            "does the handler ever stop raising Snooze? (a task's max_snoozes ends it)"
        )
    for info in q.queues():
        if info.paused and info.paused_at is not None and now - info.paused_at > args.max_pause:
            problems.append(
                f"queue {info.name!r} paused for {output.age(now - info.paused_at)} "
                f"(over --max-pause {output.age(args.max_pause)}) by {info.paused_by or '?'}"
                + (f": {info.reason}" if info.reason else "")
                + "; `errands resume` it when its reason is gone"
            )
    problems.extend(order.blocked(b, now))
    limits = horizon.Limits(args.max_dead_tuples, args.max_horizon_age, args.max_horizon_xids)
    problems.extend(horizon.problems(horizon.collect(b, now), limits))
    return problems


def run(args: argparse.Namespace) -> int:
    with open_queue(args, must_exist=True) as q:
        problems = check_problems(q, args)
        warnings = [] if q.graduation() is not None else check_warnings(q)
        warnings += horizon.warnings(horizon.collect(q.reads, q.clock()))
    if args.json:
        print(json.dumps({"ok": not problems, "problems": problems, "warnings": warnings}))
    else:
        for p in problems:
            print(p)
        for w in warnings:  # stderr: stdout stays one line per problem, or "ok"
            print(f"warning: {w}", file=sys.stderr)
        if not problems:
            print("ok")
    return ACT if problems else OK
