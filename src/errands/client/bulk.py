"""What operator actions on many jobs share: which states each action may select, the report,
and the runner that acts in short transactions.

The actions themselves are the Queue's (client/admin.py ``Actions``: ``select_jobs`` then
``act``), which the CLI and the dashboard call: they first select the ids — that is the count
shown for confirmation — then act on exactly those ids. Each action is fenced in SQL on the
job's state, so a job that moved on in between is skipped, never forced.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..backends.base import ActionReport, Audit, CancelReport
from ..core.records import ActivityEntry
from ..core.states import DELETE_FROM, REPRIORITIZE_FROM, RUN_NOW_FROM, State, transition

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


@dataclass(slots=True)
class BulkReport:
    selected: int = 0
    changed: list[int] = field(default_factory=list)  # retried / cancelled
    requested: list[int] = field(default_factory=list)  # running: cancel requested
    refused: dict[int, str] = field(default_factory=dict)  # delete/run now/priority: why not

    @property
    def skipped(self) -> int:
        return self.selected - len(self.changed) - len(self.requested)


Result = ActionReport | CancelReport | list[int]


def chunked(
    act: Callable[[Sequence[int], Audit | None], Result],
    ids: Sequence[int],
    row: Callable[[BulkReport], ActivityEntry] | None = None,
) -> BulkReport:
    """Run ``act`` (a backend verb, its other arguments bound) on ``ids``, CHUNK ids per
    transaction, the reports merged; the first REFUSALS_SHOWN reasons kept (the count is
    always whole). The one runner of every operator action (``Queue.act``). ``row``: the
    activity log's row for the whole report so far, which each transaction writes with its
    own changes (the first inserts it, the next ones bring it up to date): a change is never
    committed without the row that says who made it."""
    report = BulkReport(selected=len(ids))
    audit = None
    if row is not None:
        audit = Audit(lambda done: row(_merged(_copy(report), done)))
    for i in range(0, len(ids), CHUNK):
        _merged(report, act(ids[i : i + CHUNK], audit))
    return report


def _copy(report: BulkReport) -> BulkReport:
    return BulkReport(
        report.selected, list(report.changed), list(report.requested), dict(report.refused)
    )


def _merged(report: BulkReport, done: Result) -> BulkReport:
    if isinstance(done, list):  # retry: the ids it changed
        report.changed += done
    elif isinstance(done, CancelReport):
        report.changed += done.cancelled
        report.requested += done.requested
    else:
        report.changed += done.changed
        for job_id, why in done.refused.items():
            if len(report.refused) < REFUSALS_SHOWN:
                report.refused[job_id] = why
    return report
