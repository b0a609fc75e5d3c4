"""Operator commands: stats, errors, bulk retry/cancel, prune, vacuum, periodic, check, metrics.

``register(subparsers)`` adds them to the ``errands`` parser; each sets ``func`` (called with
the parsed namespace, returning the exit status: 0 ok, 1 the user must act, 2 bad usage).
Bulk retry/cancel (``--status``) live here too; ``cli.jobs`` hands them over.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

from .. import horizon
from ..backends import scrub
from ..backends.base import PruneProgress
from ..client import bulk
from ..core import validate
from ..errors import ErrandsError, InvalidTransitionError, JobNotFoundError
from ..queue import MAX_BATCH, Queue
from . import actions, check, jobs, output
from .common import UsageError, add_db, cli_actor, duration, open_queue

OK, ACT, USAGE = 0, 1, 2
TOP = jobs.int_between(1, validate.INT32_MAX)


def fraction(text: str) -> float:
    """A rate between 0 and 1 (argparse type)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r:.40} is not a number") from None
    if not 0 <= value <= 1:  # also refuses NaN
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, got {text:.40}")
    return value


def _open(args: argparse.Namespace) -> Queue:
    return open_queue(args, must_exist=True)


def _add(
    subparsers: Any, name: str, help_text: str, func: Callable[[argparse.Namespace], int]
) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = subparsers.add_parser(name, help=help_text, description=help_text)
    add_db(p)
    p.set_defaults(func=_guarded(func))
    return p


def _guarded(func: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        try:
            return func(args)
        except ErrandsError as exc:  # one line that says what to do; the user must act
            urls = (getattr(args, "db", None), os.environ.get("ERRANDS_DB"))
            print(f"errands: {scrub(str(exc), *urls)}", file=sys.stderr)
            return ACT

    return run


def register(subparsers: Any) -> None:
    p = _add(
        subparsers, "stats", "the five questions: states, stuck, retries, errors, speed", _stats
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--window", type=duration, default=86400.0, help="retries/errors window")
    p.add_argument("--top", type=TOP, default=10, help="how many error codes to show")

    p = _add(subparsers, "errors", "most frequent error codes with type and last seen", _errors)
    p.add_argument("--top", type=TOP, default=10, help="how many error codes to show")
    p.add_argument("--since", type=duration, default=86400.0, help="window, e.g. 24h, 7d")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")

    p = _add(
        subparsers, "retry", "retry jobs by id, or every failed/cancelled job matching", _retry
    )
    _add_bulk_selection(p, bulk.RETRYABLE)
    p.add_argument(
        "--reset-steps",
        action="store_true",
        help="forget the jobs' recorded durable steps first, so they start over (after a "
        "STEP:MISMATCH); with job ids only",
    )

    p = _add(
        subparsers, "cancel", "cancel jobs by id, or every queued/running job matching", _cancel
    )
    _add_bulk_selection(p, bulk.CANCELLABLE)

    p = _add(subparsers, "prune", "delete finished jobs past retention (rolled up first)", _prune)
    p.add_argument("--dry-run", action="store_true", help="only count what would go")
    p.add_argument(
        "--batch-size",
        type=jobs.int_between(1, MAX_BATCH),
        default=1000,
        help="rows per transaction",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of text")

    _add(subparsers, "vacuum", "shrink the database file (locks it: run off-peak)", _vacuum)

    p = _add(
        subparsers,
        "periodic",
        "periodic schedules: next run, last success, overdue, retired; "
        "`errands periodic disable|enable|run NAME`; `errands periodic remove NAME` deletes a "
        "retired one",
        _periodic,
    )
    p.add_argument(
        "action",
        nargs="?",
        choices=["remove", "disable", "enable", "run"],
        help="remove NAME (a retired one), disable/enable NAME, run NAME (one job now)",
    )
    p.add_argument("name", nargs="?", help="the schedule")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")

    p = _add(subparsers, "check", "health probe: exit 1 with one line per problem", check.run)
    p.add_argument("--max-wait", type=duration, default=300.0, help="oldest due job's wait")
    p.add_argument(
        "--max-failure-rate", type=fraction, default=0.5, help="failed/finished in the last hour"
    )
    p.add_argument(
        "--min-finished",
        type=jobs.int_between(0, validate.INT64_MAX),
        default=10,
        help="finished jobs needed to judge the rate",
    )
    p.add_argument(
        "--lease-grace", type=duration, default=30.0, help="how far past its lease a job may be"
    )
    p.add_argument(
        "--max-pause", type=duration, default=3600.0, help="how long a queue may stay paused"
    )
    p.add_argument(
        "--snooze-loop",
        type=jobs.int_between(1, validate.MAX_ATTEMPTS_MAX),
        default=100,
        help="report a queued job started this many times whose last attempt snoozed",
    )
    check.add_horizon_limits(p)
    p.add_argument("--json", action="store_true", help="print JSON instead of text")

    _add(subparsers, "metrics", "Prometheus metrics in the text format, to stdout", _metrics)


# -- commands ------------------------------------------------------------------------------


def _add_bulk_selection(p: argparse.ArgumentParser, states: Iterable[str]) -> None:
    """retry and cancel select the same way: ids, or a state narrowed by type, queue, code."""
    p.add_argument("ids", nargs="*", type=jobs.job_id, help="job ids (or use --status)")
    p.add_argument(
        "--status",
        choices=sorted(states),
        help="every job in this state, narrowed by the options below",
    )
    p.add_argument("--type", type=jobs.filter_of("type"), help="only jobs of this type")
    p.add_argument("--queue", type=jobs.filter_of("queue"), help="only jobs in this queue")
    p.add_argument(
        "--error-code", type=jobs.filter_of("error_code"), help="only jobs with this error code"
    )
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")


def _stats(args: argparse.Namespace) -> int:
    with _open(args) as q:
        stats = q.stats(window=args.window, top=args.top)
        if args.json:
            print(json.dumps(stats, indent=2))
        else:
            print(render_stats(stats, q.display_url))
    return OK


def render_stats(st: dict[str, Any], url: str) -> str:
    lines = [f"errands · {url} · {st['now']}"]
    c = st["counts"]
    lines.append("jobs      " + "  ".join(f"{k} {v:,}" for k, v in c.items()))
    active = [r for r in st["by_queue_type"] if r["status"] in ("queued", "running", "failed")]
    for r in active[:12]:
        lines.append(f"          {r['status']:<9} {r['queue']}/{r['type']}: {r['count']:,}")
    if len(active) > 12:
        lines.append(f"          … {len(active) - 12} more (errands stats --json)")
    if st["oldest_running"]:
        lines.append("running   oldest by last sign of life:")
        for r in st["oldest_running"][:5]:
            alive = "alive" if r["worker_alive"] else "NOT ALIVE"
            late = "  PAST LEASE" if r["past_lease"] else ""
            lines.append(
                f"          #{r['id']} {r['type']} attempt {r['attempt']} on {r['worker_id']} "
                f"({alive}) quiet {output.age(r['age_seconds'])}{late}"
            )
    for p in st.get("paused_queues", []):
        lines.append(
            f"paused    {p['name']} by {p['paused_by'] or '?'}, "
            f"{output.age(time.time() - p['paused_at'])} ago"
            + (f": {p['reason']}" if p["reason"] else "")
        )
    due = st["oldest_due"]
    lines.append(
        "due       nothing waiting"
        if due is None
        else f"due       oldest #{due['id']} {due['type']} "
        f"waiting {output.age(due['wait_seconds'])}"
    )
    hist = st["retries"]["histogram"]
    window = output.age(st["retries"]["window_seconds"])
    spread = "  ".join(f"{k} attempt(s): {v:,}" for k, v in hist.items())
    lines.append(f"attempts  ({window}) {spread or 'nothing finished'}")
    if st["top_errors"]:
        lines.append(f"errors    ({window})")
        for e in st["top_errors"]:
            lines.append(
                f"          {e['count']:>7,}  {e['error_code']}  {e['type']}  "
                f"last {e['last_seen'] or 'pending retry'}"
            )
    else:
        lines.append(f"errors    ({window}) none")
    h = st["last_hour"]
    lines.append(
        f"last hour {h['processed']:,} finished ({h['per_minute']}/min), "
        f"{h['failure_rate']:.1%} of them failed"
    )
    lines.append(
        f"          waited from due to start: median {output.age(h['wait_p50'])}, "
        f"95% within {output.age(h['wait_p95'])}"
    )
    lines.append(
        f"          ran (handler start to outcome): median {output.age(h['run_p50'])}, "
        f"95% within {output.age(h['run_p95'])}"
    )
    for u in st["unhandled_types"]:
        lines.append(
            f"UNHANDLED {u['queue']}/{u['type']}: {u['queued']:,} queued, no live worker runs it"
        )
    for o in st["periodic_overdue"]:
        lines.append(f"OVERDUE   periodic {o['name']}: {o['reason']}")
    for o in st.get("periodic_retired", ()):
        lines.append(f"retired   periodic {o['name']}: no live worker declares it")
    for o in st.get("periodic_disabled", ()):
        lines.append(f"disabled  periodic {o['name']}: since {o['since']} by {o['by']}")
    lines.extend(horizon.stats_lines(st["vacuum"]))
    if st["wal"]["warning"]:
        lines.append(f"WAL       {st['wal']['warning']}")
    workers = st["workers"]
    lines.append(f"workers   {len(workers)} live")
    for w in workers[:10]:
        queues = ",".join(w["queues"]) if w["queues"] else "all queues"
        lines.append(
            f"          {w['id']} pid {w['pid']} on {w['hostname']} ({queues}, "
            f"concurrency {w['concurrency']}) seen {w['last_seen_at']}"
        )
    return "\n".join(lines)


def _errors(args: argparse.Namespace) -> int:
    with _open(args) as q:
        rows = q.errors(top=args.top, since=args.since)
    if args.json:
        print(json.dumps(rows, indent=2))
    elif not rows:
        print(f"no errors in the last {output.age(args.since)}")
    else:
        for e in rows:
            print(
                f"{e['count']:>7,}  {e['error_code']}  {e['type']}  "
                f"last {e['last_seen'] or 'pending retry'}"
            )
    return OK


def _confirm(verb: str, n: int, args: argparse.Namespace) -> bool:
    if args.yes:
        return True
    try:
        answer = input(f"{verb} {n:,} job(s)? [y/N] ")
    except EOFError:
        answer = ""
    if answer.strip().lower() in ("y", "yes"):
        return True
    print(
        f"errands: nothing changed (pass --yes to {verb.lower()} without asking)",
        file=sys.stderr,
    )
    return False


def _bulk(args: argparse.Namespace, verb: str, allowed: frozenset[str]) -> int:
    if args.ids and args.status:
        print(
            f"errands: give job ids or --status, not both; e.g. errands {verb.lower()} 12 13, "
            f"or errands {verb.lower()} --status {sorted(allowed)[0]} --yes",
            file=sys.stderr,
        )
        return USAGE
    if not args.ids and not args.status:
        print(
            f"errands: say which jobs to {verb.lower()}: job ids (errands {verb.lower()} 12 13) "
            f"or --status {'|'.join(sorted(allowed))} with optional --type/--queue/--error-code",
            file=sys.stderr,
        )
        return USAGE
    with _open(args) as q:
        if args.ids:
            ids = list(args.ids)
        else:
            ids = q.select_jobs(
                verb.lower(),
                args.status,
                type=args.type,
                queue=args.queue,
                error_code=args.error_code,
            )
            print(f"{len(ids):,} {args.status} job(s) match")
            if not ids:
                return OK
            if not _confirm(verb, len(ids), args):
                return ACT
        filters = None if args.ids else {"status": args.status, "type": args.type}
        if filters is not None:
            filters |= {"queue": args.queue, "error_code": args.error_code}
        report = q.act(verb.lower(), ids, actor=cli_actor(), selected_by=filters)
    done = "retried" if verb == "Retry" else "cancelled"
    extra = f", {len(report.requested):,} running asked to stop" if report.requested else ""
    print(f"{len(report.changed):,} {done}{extra}, {report.skipped:,} skipped (state changed)")
    return OK if not args.ids or report.skipped == 0 else ACT


def _retry(args: argparse.Namespace) -> int:
    if args.ids and not args.status:
        return jobs.cmd_retry(args)  # one line per id
    if args.reset_steps:
        raise UsageError(
            "--reset-steps takes job ids (errands retry ID… --reset-steps), not --status: "
            "forgetting recorded steps is a decision per job"
        )
    return _bulk(args, "Retry", bulk.RETRYABLE)


def _cancel(args: argparse.Namespace) -> int:
    if args.ids and not args.status:
        return jobs.cmd_cancel(args)
    return _bulk(args, "Cancel", bulk.CANCELLABLE)


def _prune(args: argparse.Namespace) -> int:
    last = [time.monotonic()]

    def progress(p: PruneProgress) -> None:
        if time.monotonic() - last[0] >= 1.0:  # long runs: a line a second, not per batch
            last[0] = time.monotonic()
            print(f"… {p.total_deleted:,} deleted ({p.state}: {p.deleted:,})", file=sys.stderr)

    with _open(args) as q:
        report = q.prune(
            dry_run=args.dry_run,
            batch_size=args.batch_size,
            progress=progress,
            actor=cli_actor(),
        )
    if args.json:
        out = {
            "dry_run": report.dry_run,
            "deleted": report.deleted,
            "total": report.total,
            "batches": report.batches,
            "checkpointed": report.checkpointed,
        }
        print(json.dumps(out))
        return OK
    verb = "would delete" if report.dry_run else "deleted"
    per = ", ".join(f"{k} {v:,}" for k, v in report.deleted.items())
    batches = f" in {report.batches} batch(es)" if report.batches else ""
    print(f"{verb} {report.total:,} job(s) ({per}){batches}")
    return OK


def _vacuum(args: argparse.Namespace) -> int:
    with _open(args) as q:
        r = q.vacuum()
    print(f"vacuumed: {r['bytes_before'] or 0:,} → {r['bytes_after'] or 0:,} bytes")
    return OK


def _periodic(args: argparse.Namespace) -> int:
    if args.action in ("disable", "enable", "run"):
        if not args.name:
            print(f"errands: usage: errands periodic {args.action} NAME", file=sys.stderr)
            return USAGE
        with _open(args) as q:
            return actions.periodic_action(args, q)
    if args.action == "remove" or args.name is not None:
        return _periodic_remove(args)
    with _open(args) as q:
        rows = q.periodic_report()
    if args.json:
        print(json.dumps(rows, indent=2))
        return OK
    if not rows:
        print("no periodic schedules")
    for r in rows:
        when = r["cron"] or f"every {output.age(r['every_seconds'])}"
        state = (
            f"DISABLED since {r['disabled_at']} by {r['disabled_by']}"
            if r["disabled"]
            else f"OVERDUE: {r['overdue_reason']}"
            if r["overdue"]
            else "retired: no live worker declares it (errands periodic remove NAME)"
            if r["retired"]
            else "ok"
        )
        print(
            f"{r['name']}  [{when} {r['timezone']}]  next {r['next_run_at']}  "
            f"last success {r['last_succeeded_at'] or 'never'}  {state}"
        )
    return OK


def _periodic_remove(args: argparse.Namespace) -> int:
    if args.action != "remove" or not args.name:
        print("errands: usage: errands periodic remove NAME", file=sys.stderr)
        return USAGE
    name = validate.text(args.name, "schedule name")  # a NUL or lone surrogate, named
    with _open(args) as q:
        try:
            q.remove_periodic(name, actor=cli_actor())
        except InvalidTransitionError as exc:
            print(f"errands: {exc}", file=sys.stderr)
            return ACT
        except JobNotFoundError:
            print(
                f"errands: no schedule named {name!r}; list them with `errands periodic`",
                file=sys.stderr,
            )
            return ACT
    print(f"removed schedule {name!r} (its jobs stay as they are)")
    return OK


def _metrics(args: argparse.Namespace) -> int:
    from ..metrics import render_metrics

    with _open(args) as q:
        data = render_metrics(q)
    sys.stdout.buffer.write(data)
    sys.stdout.flush()
    return OK
