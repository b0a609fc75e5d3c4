"""``errands deps ID``: the graph around one job (docs/pipelines.md), and the lines ``show``
adds."""

from __future__ import annotations

import argparse
from typing import Any

from ..errors import JobNotFoundError
from . import output
from .common import add_db, add_json, open_queue


def register(sub: Any, job_id: Any) -> None:
    p = sub.add_parser(
        "deps",
        help="the jobs a job runs after, and the jobs that run after it",
        description="Show the jobs around one: upstream (it was enqueued after them) and "
        "downstream (enqueued after it), with their states. See docs/pipelines.md.",
    )
    p.add_argument("id", type=job_id, metavar="ID", help="the job at the centre")
    add_db(p)
    add_json(p)
    p.set_defaults(func=cmd_deps)


def cmd_deps(args: argparse.Namespace) -> int:
    with open_queue(args, must_exist=True) as q:
        job = q.get(args.id)
        if job is None:
            raise JobNotFoundError(f"no job with id {args.id}; list jobs with `errands jobs`")
        around = q.graph(job.id)
    if args.json:
        output.emit_json({"job": {"id": job.id, "type": job.type, "status": job.status}, **around})
        return 0
    print(f"job {job.id} ({job.type}): {job.status}")
    for line in lines(around):
        print(line)
    return 0


def lines(around: dict[str, list[dict[str, Any]]]) -> list[str]:
    """The graph as text: one line per neighbour (empty for a job without dependencies)."""
    out: list[str] = []
    for side, arrow in (("upstream", "runs after"), ("downstream", "runs before")):
        edges = around[side]
        if not edges:
            continue
        out.append(f"{side.capitalize()} ({len(edges)}): it {arrow}")
        out.extend(
            f"  #{e['id']:<8} {e['type']:<24} {e['status']:<10} "
            f"on_upstream_failure={e['on_upstream_failure']}"
            for e in edges
        )
    return out
