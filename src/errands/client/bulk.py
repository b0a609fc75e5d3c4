"""Bulk operator actions: retry, cancel, delete, run now or reprioritize every job matching a
filter (or a list of ids), in short transactions.

Callers (the CLI, the dashboard) first ``select`` the ids — that is the count shown for
confirmation — then act on exactly those ids. Each action is fenced in SQL on the job's state,
so a job that moved on in between is skipped, never forced.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..backends.base import ActionReport, Backend
from ..core import validate
from ..core.states import DELETE_FROM, REPRIORITIZE_FROM, RUN_NOW_FROM, State, transition
from ..errors import ConfigurationError

CHUNK = 500  # ids per transaction: keeps the write lock short on large selections

RETRYABLE = frozenset(s.value for s in transition("retry").source)
CANCELLABLE = frozenset({State.WAITING.value, State.QUEUED.value, State.RUNNING.value})
DELETABLE = frozenset(s.value for s in DELETE_FROM)
RUNNABLE_NOW = frozenset(s.value for s in RUN_NOW_FROM)
REPRIORITIZABLE = frozenset(s.value for s in REPRIORITIZE_FROM)
# the statuses each action may select
SELECTABLE = {
    "retry": RETRYABLE,
    "cancel": CANCELLABLE,
    "delete": DELETABLE,
    "run_now": RUNNABLE_NOW,
    "priority": REPRIORITIZABLE,
}
REFUSALS_SHOWN = 100  # refusal reasons a report keeps (the count is always whole)
log = logging.getLogger("errands")


@dataclass(slots=True)
class BulkReport:
    selected: int = 0
    changed: list[int] = field(default_factory=list)  # retried / cancelled
    requested: list[int] = field(default_factory=list)  # running: cancel requested
    refused: dict[int, str] = field(default_factory=dict)  # delete/run now/priority: why not

    @property
    def skipped(self) -> int:
        return self.selected - len(self.changed) - len(self.requested)


def select(
    backend: Backend,
    status: str,
    *,
    allowed: frozenset[str],
    type: str | None = None,
    queue: str | None = None,
    error_code: str | None = None,
) -> list[int]:
    if status not in allowed:
        raise ConfigurationError(
            f"status {status!r} cannot be used here; choose one of {', '.join(sorted(allowed))}"
        )
    return backend.match_ids(
        status,
        type=validate.filter_text(type, "type"),
        queue=validate.filter_text(queue, "queue"),
        error_code=validate.filter_text(error_code, "error_code"),
    )


def retry(backend: Backend, ids: Sequence[int], actor: str, now: float) -> BulkReport:
    report = BulkReport(selected=len(ids))
    for i in range(0, len(ids), CHUNK):
        report.changed += backend.retry(ids[i : i + CHUNK], actor, now)
    return report


def cancel(backend: Backend, ids: Sequence[int], actor: str, now: float) -> BulkReport:
    report = BulkReport(selected=len(ids))
    for i in range(0, len(ids), CHUNK):
        done = backend.cancel(ids[i : i + CHUNK], actor, now)
        report.changed += done.cancelled
        report.requested += done.requested
    return report


def edit(act: Callable[[Sequence[int]], ActionReport], ids: Sequence[int]) -> BulkReport:
    """Delete, run now or reprioritize ``ids`` (``act``: the backend verb with its other
    arguments bound), CHUNK ids per transaction; the first REFUSALS_SHOWN reasons kept."""
    report = BulkReport(selected=len(ids))
    for i in range(0, len(ids), CHUNK):
        done = act(ids[i : i + CHUNK])
        report.changed += done.changed
        for job_id, why in done.refused.items():
            if len(report.refused) < REFUSALS_SHOWN:
                report.refused[job_id] = why
    return report


def delete(backend: Backend, ids: Sequence[int], actor: str, now: float) -> BulkReport:
    report = edit(lambda part: backend.delete_jobs(part, actor, now), ids)
    if report.changed:  # a deleted job's events go with it: the log keeps who and which
        shown = ", ".join(map(str, report.changed[:50]))
        more = f" … ({len(report.changed)} in all)" if len(report.changed) > 50 else ""
        log.info("jobs deleted by %s: %s%s", actor, shown, more)
    return report


def run_now(backend: Backend, ids: Sequence[int], actor: str, now: float) -> BulkReport:
    return edit(lambda part: backend.run_now(part, actor, now), ids)


def set_priority(
    backend: Backend, ids: Sequence[int], priority: int, actor: str, now: float
) -> BulkReport:
    validate.integer(priority, "priority", *validate.PRIORITY_RANGE)
    return edit(lambda part: backend.set_priority(part, priority, actor, now), ids)
