"""The operator activity log as the Queue's mixin (docs/dashboard.md, "Activity"): every
operator action the Queue takes — on jobs (``act``), queues, limits, schedules, prune — leaves
one row saying who, what, on what, how many and by which filter (backends/activity.py). Jobs
keep their own events; this log outlives them (a deleted job takes its events along) and holds
the actions that touch no job at all (a pause, a limit, a schedule switched off)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from ..backends.base import Audit
from ..core import validate
from ..core.records import ActivityEntry
from .parts import QueueParts

IDS_KEPT = 50  # job ids a row's detail lists (its count is always whole)
MAX_LIMIT = 1000  # rows one read may ask for


class ActivityLog(QueueParts):
    """Record and read operator actions."""

    def activity(
        self,
        *,
        limit: int = 100,
        before: int | None = None,
        actor: str | None = None,
        action: str | None = None,
    ) -> list[ActivityEntry]:
        """Operator actions, newest first: each an ``ActivityEntry`` (``id``, ``at``,
        ``actor``, ``action``, ``target``, ``count``, ``filter``, ``detail``). Page with
        ``before`` (the last ``id`` read); narrow to one ``actor`` or ``action``."""
        validate.integer(limit, "limit", 1, MAX_LIMIT)
        if before is not None:
            validate.integer(before, "before", 1, validate.INT64_MAX)
        return self.backend.list_activity(
            limit=limit,
            before=before,
            actor=validate.filter_text(actor, "actor"),
            action=validate.filter_text(action, "action"),
        )

    def record_activity(
        self,
        action: str,
        *,
        actor: str,
        target: str | None = None,
        count: int = 0,
        filter: Mapping[str, Any] | None = None,
        detail: Mapping[str, Any] | None = None,
    ) -> int:
        """Add one row to the activity log (what the Queue's own operator actions do): an
        application's own operator action belongs there too. Returns its id."""
        return self.backend.record_activity(
            self._activity_entry(
                action, actor=actor, target=target, count=count, filter=filter, detail=detail
            )
        )

    def _activity_entry(
        self,
        action: str,
        *,
        actor: str,
        target: str | None = None,
        count: int = 0,
        filter: Mapping[str, Any] | None = None,
        detail: Mapping[str, Any] | None = None,
    ) -> ActivityEntry:
        """One activity row, checked, timed now: for ``record_activity``, or for a verb to
        write in its own transaction (``_audit``)."""
        return ActivityEntry(
            at=datetime.fromtimestamp(self.clock(), UTC),
            actor=validate.text(actor, "actor", max_bytes=200),
            action=validate.text(action, "action", max_bytes=64),
            target=None if target is None else target[:500],
            count=validate.integer(count, "count", 0, validate.INT64_MAX),
            filter=None if filter is None else {k: v for k, v in filter.items() if v is not None},
            detail=None if detail is None else dict(detail),
        )

    def _audit(self, action: str, *, actor: str, target: str | None, **row: Any) -> Audit:
        """The row of an action whose count and detail do not depend on what its verb did."""
        entry = self._activity_entry(action, actor=actor, target=target, **row)
        return Audit(lambda _result: entry)

    def _by_hand(self, action: str, by_hand: bool, actor: str, **detail: Any) -> Audit | None:
        """The row of a job enqueued or signalled by hand (``by_hand=True``: the CLI's and the
        admin API's), checked now; its target is known only in the verb's transaction (an
        enqueue's ids, a signal's job id: named by ``unique_key``, it is found there). None
        for the application's own enqueues and signals, which log nothing."""
        if validate.flag(by_hand, "by_hand") is False:
            return None
        entry = self._activity_entry(action, actor=actor, count=1, detail=detail)
        return Audit(lambda job: replace(entry, target=jobs_target(_ids(job))))


def _ids(result: int | list[int]) -> list[int]:
    return result if isinstance(result, list) else [result]


def jobs_target(ids: Sequence[int]) -> str:
    """A short summary of job ids for the ``target`` column: ``job 7``, ``jobs 7, 8, 9`` or
    ``jobs 7, 8, 9 … (1,204 in all)``."""
    if len(ids) == 1:
        return f"job {ids[0]}"
    shown = ", ".join(map(str, ids[:5]))
    return f"jobs {shown}" + (f" … ({len(ids):,} in all)" if len(ids) > 5 else "")
