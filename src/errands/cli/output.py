"""Printing for the command line: tables, times, JSON, and the one-line error."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, TextIO

from ..core.records import Attempt, EventRecord, Job

PROG = "errands"


def error(message: str) -> None:
    """The one line a failed command prints: ``errands: <what is wrong and what to do>``."""
    print(f"{PROG}: {message}", file=sys.stderr)


def emit_json(value: Any, out: TextIO | None = None) -> None:
    json.dump(value, out or sys.stdout, indent=2, sort_keys=False, default=str)
    (out or sys.stdout).write("\n")


def when(value: datetime | None) -> str:
    """A timestamp for a table: UTC, to the second (the JSON output keeps full precision)."""
    if value is None:
        return "-"
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def when_ms(value: datetime | None) -> str:
    if value is None:
        return "-"
    return value.astimezone(UTC).strftime("%H:%M:%S.%f")[:-3]


def offset(value: datetime | None, origin: datetime | None) -> str:
    """``+1.234s`` since the job was created: a timeline reads better as elapsed time."""
    if value is None or origin is None:
        return ""
    return f"+{(value - origin).total_seconds():.3f}s"


def clip(text: str | None, width: int) -> str:
    if not text:
        return "-"
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 1] + "…"


def table(
    headers: Sequence[str],
    rows: Sequence[Sequence[Any]],
    out: TextIO | None = None,
    *,
    right: Sequence[int] = (),
) -> None:
    """Left-aligned columns, numbers (and the ``right`` columns) right-aligned."""
    stream = out or sys.stdout
    cells = [[str(c) for c in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, c in enumerate(row):
            widths[i] = max(widths[i], len(c))
    numeric = [
        i in right or (bool(rows) and all(isinstance(r[i], int | float) for r in rows))
        for i in range(len(headers))
    ]

    def line(values: Sequence[str]) -> str:
        parts = [
            v.rjust(widths[i]) if numeric[i] else v.ljust(widths[i]) for i, v in enumerate(values)
        ]
        return "  ".join(parts).rstrip()

    print(line(list(headers)), file=stream)
    for row in cells:
        print(line(row), file=stream)


def jobs_table(jobs: Sequence[Job], out: TextIO | None = None) -> None:
    rows = [
        (
            j.id,
            j.status,
            j.queue,
            j.type,
            f"{j.attempts}/{j.max_attempts}",
            when(j.run_at),
            when(j.finished_at),
            progress(j),
            clip(j.error_code, 30),
        )
        for j in jobs
    ]
    table(
        [
            "ID",
            "STATUS",
            "QUEUE",
            "TYPE",
            "ATTEMPTS",
            "RUN AT (UTC)",
            "FINISHED (UTC)",
            "PROGRESS",
            "ERROR",
        ],
        rows,
        out,
    )


def progress(job: Job, *, message: bool = False) -> str:
    """A job's latest ctx.progress() as "40%" (with its message and when, for ``show``)."""
    if job.progress is None:
        return "-"
    text = f"{job.progress:.0%}"
    if message and job.progress_message:
        text += f" {job.progress_message}"
    if message and job.progress_at is not None:
        text += f" (at {when(job.progress_at)})"
    return text


def job_detail(job: Job, out: TextIO | None = None) -> None:
    stream = out or sys.stdout
    fields = [
        ("id", job.id),
        ("type", job.type),
        ("queue", job.queue),
        ("status", job.status + (" (cancel requested)" if job.cancel_requested else "")),
        ("priority", job.priority),
        ("attempts", f"{job.attempts} of {job.max_attempts}"),
        ("payload", json.dumps(job.payload)),
        (
            "unique key",
            (job.unique_key or "-")
            + (f" (held {job.unique_for:g}s after success)" if job.unique_for else ""),
        ),
        ("debounce key", job.debounce_key or "-"),
        ("start by", when(job.expires_at)),
        ("deadline", when(job.deadline_at)),
        ("created", when(job.created_at)),
        ("run at", when(job.run_at)),
        ("started", when(job.started_at)),
        ("finished", when(job.finished_at)),
        ("worker", job.worker_id or "-"),
        ("error", f"{job.error_code}: {job.error_detail or ''}" if job.error_code else "-"),
        ("result", "-" if job.result is None else json.dumps(job.result)),
        ("progress", progress(job, message=True)),
        (
            "limit",
            job.limit_key + (f" [{job.limit_group}]" if job.limit_group else "")
            if job.limit_key
            else "-",
        ),
    ]
    width = max(len(k) for k, _ in fields)
    print(f"Job {job.id}", file=stream)
    for key, value in fields:
        print(f"  {key.ljust(width)}  {clip(str(value), 200)}", file=stream)


def attempts_table(attempts: Sequence[Attempt], out: TextIO | None = None) -> None:
    rows = [
        (
            a.attempt,
            a.status,
            when_ms(a.started_at),
            f"{(a.finished_at - a.started_at).total_seconds():.3f}s"
            if a.finished_at and a.started_at
            else "-",
            clip(a.worker_id, 32),
            clip(a.error_code, 30),
            clip(a.error_detail, 50),
        )
        for a in attempts
    ]
    table(["#", "STATUS", "STARTED", "TOOK", "WORKER", "ERROR CODE", "DETAIL"], rows, out)


def events_table(
    events: Sequence[EventRecord], origin: datetime | None, out: TextIO | None = None
) -> None:
    rows = [
        (
            when_ms(e.ts),
            offset(e.ts, origin),
            e.event,
            clip(e.actor, 32),
            "" if e.detail in (None, {}) else clip(json.dumps(e.detail), 90),
        )
        for e in events
    ]
    table(["TIME (UTC)", "SINCE CREATED", "EVENT", "ACTOR", "DETAIL"], rows, out)


def age(seconds: float | None) -> str:
    """A duration as people read it: 4.2s, 37s, 5m07s, 3h04m, 2d05h ("-" for none)."""
    if seconds is None:
        return "-"
    s = int(seconds)
    if s < 60:
        return f"{seconds:.1f}s" if seconds < 10 else f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"
