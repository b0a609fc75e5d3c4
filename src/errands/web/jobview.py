"""What the job page shows beyond the job's own row: its story (one step per attempt), the
``errands`` command for each action its state allows, what its buttons did (``?done=``), how
long each durable call took and the sleep or wait it is in, and its events' details.
"""

from __future__ import annotations

import json
from typing import Any

from ..client import bulk


def timeline(job: Any, attempts: list[Any], now: float) -> list[dict[str, Any]]:
    """The job's story, one step per attempt: the wait before it (from creation or from the
    previous attempt's end), its start, how long it ran, its worker and how it ended; then,
    for a job still queued, the wait so far or until it is due."""
    steps: list[dict[str, Any]] = []
    before = job.created_at
    for a in attempts:
        start, end = a.started_at, a.finished_at
        waited = (start - before).total_seconds() if start and before else None
        ran = ((end.timestamp() if end else now) - start.timestamp()) if start else None
        steps.append(
            {
                "kind": "attempt",
                "attempt": a,
                "waited": waited,
                "ran": ran,
                "open": end is None,
                "outcome": a.status,
            }
        )
        before = end or before
    if job.status == "queued" and job.run_at is not None:
        due = job.run_at.timestamp()
        steps.append({"kind": "next", "at": job.run_at, "in": due - now, "retry": bool(attempts)})
    return steps


def commands(job: Any, now: float) -> list[tuple[str, str]]:
    """(what, command) for each thing an operator can do to this job from a shell."""
    out = [("show", f"errands show {job.id}")]
    if job.status in bulk.RETRYABLE:
        out.append(("retry", f"errands retry {job.id}"))
    if job.status in bulk.CANCELLABLE:
        out.append(("cancel", f"errands cancel {job.id}"))
    if can_run_now(job, now):
        out.append(("run now", f"errands run-now {job.id}"))
    if job.status in bulk.REPRIORITIZABLE:
        out.append(("priority", f"errands priority {job.priority} {job.id}"))
    if job.status in bulk.DELETABLE:
        out.append(("delete", f"errands delete {job.id}"))
    return out


# What the job page's buttons did (``?done=``, after the redirect): fixed texts, so the address
# cannot put words on the page.
JOB_NOTICES = {
    "retry": "Retried: the job is queued again with one more attempt.",
    "cancel": "Cancelled.",
    "cancel_requested": "Cancel requested: the running attempt is asked to stop.",
    "run_now": "Made due now: the next free worker runs it.",
    "priority": "Priority changed.",
    "signal": "Signal sent: a job waiting for it is queued to go on.",
}


def can_run_now(job: Any, now: float) -> bool:
    """A queued job whose run_at is still ahead (scheduled, or a retry's backoff)."""
    return (
        job.status in bulk.RUNNABLE_NOW and job.run_at is not None and job.run_at.timestamp() > now
    )


def step_took(step: Any) -> float | None:
    """How long a durable call took (a step's run, a sleep, a wait until its signal or
    timeout); None while it is not over."""
    if step.started_at is None or step.finished_at is None:
        return None
    return float((step.finished_at - step.started_at).total_seconds())


def pending_step(steps: list[Any], job: Any, now: float) -> dict[str, Any] | None:
    """The sleep or wait a job is in now, if any: the latest call, still open (a wait with
    no signal yet, or a sleep whose end is ahead) while the job is not final."""
    if not steps or job.status in ("succeeded", "failed", "cancelled"):
        return None
    last = steps[-1]
    if last.kind == "wait" and last.finished_at is None:
        return {"kind": "wait", "name": last.name, "until": last.wake_at, "since": last.started_at}
    if last.kind == "sleep" and last.wake_at is not None and last.wake_at.timestamp() > now:
        return {"kind": "sleep", "name": last.name, "until": last.wake_at, "since": last.started_at}
    return None


AFTER_SHOWN = 5  # upstream ids an event's detail lists before it says how many


def event_detail(detail: Any) -> str:
    """An event's detail as one line of JSON; a long ``after`` list (a batch's callback waits
    for every member) is cut to its first ids and the count — the batch page lists them."""
    if detail in (None, {}):
        return ""
    after = detail.get("after") if isinstance(detail, dict) else None
    if isinstance(after, list) and len(after) > AFTER_SHOWN:
        shown = ", ".join(str(i) for i in after[:AFTER_SHOWN])
        rest = {k: v for k, v in detail.items() if k != "after"}
        more = f" {json.dumps(rest, ensure_ascii=False)}" if rest else ""
        return f"after {len(after):,} jobs: {shown}, … (the batch page lists them){more}"
    return json.dumps(detail, ensure_ascii=False)
