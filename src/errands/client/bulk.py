"""Bulk operator actions: retry or cancel every job matching a filter, in short transactions.

Callers (the CLI, the dashboard) first ``select`` the ids — that is the count shown for
confirmation — then act on exactly those ids. Each action is fenced in SQL on the job's state,
so a job that moved on in between is skipped, never forced.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ..backends.base import Backend
from ..core import validate
from ..core.states import State, transition
from ..errors import ConfigurationError

CHUNK = 500  # ids per transaction: keeps the write lock short on large selections

RETRYABLE = frozenset(s.value for s in transition("retry").source)
CANCELLABLE = frozenset({State.WAITING.value, State.QUEUED.value, State.RUNNING.value})
SELECTABLE = {"retry": RETRYABLE, "cancel": CANCELLABLE}  # the statuses each action may select


@dataclass(slots=True)
class BulkReport:
    selected: int = 0
    changed: list[int] = field(default_factory=list)  # retried / cancelled
    requested: list[int] = field(default_factory=list)  # running: cancel requested

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
