"""The job list's filters, shared by the page (``/jobs``) and its JSON twin
(``/api/admin/jobs``): the exact filters the database serves from its indexes (status, type,
queue, error code, keyset ``cursor``), plus two that it cannot and that are therefore bounded:

- ``q``: text. A job matches when its type, queue or error code starts with it, or its error
  message or payload contains it (case-insensitive).
- ``view``: a situation — ``scheduled`` (queued, due later, never attempted), ``retrying``
  (queued after a failed attempt), ``snoozed`` (queued again because its latest attempt raised
  ``errands.Snooze``), ``running``, ``dead`` (failed for good).

Both are bounded, so a page costs the same on a million rows as on twenty thousand, and says
so. A text search looks at one window of ``SCAN_ROWS`` ids (the newest, or those below the
cursor), in the database (``search_jobs``: a range of the primary key); a view that needs a
look at each row (scheduled, retrying) reads at most ``SCAN_ROWS`` jobs that pass the exact
filters, newest first, and checks them here. ``snoozed`` looks at the newest ``SCAN_ROWS``
snoozed attempts instead, in the database (``snoozed_jobs``: a range of an index of the
snoozed attempts only), so snoozes are found however few they are among the queued jobs. The
answer says how many it looked at, and its cursor continues below them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..backends.base import JobFilter
from ..core.records import Job
from . import params

if TYPE_CHECKING:
    from .common import Dashboard

SCAN_ROWS = 10_000  # rows a bounded search reads at most, per request
BATCH = 500  # rows per read while scanning
# view -> (the status it reads, whether each row must be checked here)
VIEWS: dict[str, tuple[str, bool]] = {
    "scheduled": ("queued", True),
    "retrying": ("queued", True),
    "snoozed": ("queued", True),
    "running": ("running", False),
    "dead": ("failed", False),
}


@dataclass(frozen=True, slots=True)
class Filters:
    status: str | None
    type: str | None
    queue: str | None
    error_code: str | None
    text: str | None
    view: str | None
    limit: int
    cursor: int | None

    @property
    def bounded(self) -> bool:
        return self.text is not None or (self.view is not None and VIEWS[self.view][1])

    def kept(self) -> dict[str, Any]:
        """The filters as query parameters (for links: the page and the API take the same)."""
        pairs = {
            "status": None if self.view else self.status,  # a view implies its status
            "type": self.type,
            "queue": self.queue,
            "error_code": self.error_code,
            "q": self.text,
            "view": self.view,
        }
        return {k: v for k, v in pairs.items() if v}


@dataclass(frozen=True, slots=True)
class Found:
    jobs: list[Job]
    next_cursor: int | None
    scanned: int | None  # rows read by a bounded search (None: served by the index)
    scan_limit: int


def filters(query: Any) -> Filters:
    view = params.text(query, "view")
    if view is not None and view not in VIEWS:
        raise params.BadParameter(f"view must be one of {', '.join(VIEWS)}; got {view!r:.40}")
    status = params.status(query)
    if view is not None:
        wanted = VIEWS[view][0]
        if status is not None and status != wanted:
            raise params.BadParameter(f"view={view} lists {wanted} jobs; drop status={status}")
        status = wanted
    return Filters(
        status=status,
        type=params.text(query, "type"),
        queue=params.text(query, "queue"),
        error_code=params.text(query, "error_code"),
        text=params.text(query, "q"),
        view=view,
        limit=params.limit(query),
        cursor=params.cursor(query),
    )


def _snoozed(dash: Dashboard, f: Filters) -> Found:
    """The ``snoozed`` view: one window of the newest ``SCAN_ROWS`` snoozed attempts below the
    cursor, and their jobs still queued with that attempt as their latest."""
    flt = JobFilter(
        type=f.type,
        queue=f.queue,
        error_code=f.error_code,
        before_id=f.cursor,
        limit=f.limit + 1,
    )
    rows, looked, floor = dash.queue.reads.snoozed_jobs(flt, SCAN_ROWS)
    if len(rows) > f.limit:
        rows = rows[: f.limit]
        return Found(rows, rows[-1].id, looked, SCAN_ROWS)
    return Found(rows, floor if looked == SCAN_ROWS else None, looked, SCAN_ROWS)


def _snoozed_in(dash: Dashboard, f: Filters, floor: int, top: int) -> tuple[set[int], int]:
    """For a text search in the ``snoozed`` view: the snoozed jobs with ids in ``floor <= id
    < top``, and the floor raised to where that look stopped, if it stopped short."""
    flt = JobFilter(
        type=f.type, queue=f.queue, error_code=f.error_code, before_id=top, limit=SCAN_ROWS
    )
    rows, looked, lowest = dash.queue.reads.snoozed_jobs(flt, SCAN_ROWS, floor)
    if looked == SCAN_ROWS and lowest is not None:
        floor = max(floor, lowest)
    return {j.id for j in rows}, floor


def _in_view(job: Job, f: Filters, now: float) -> bool:
    if f.view == "scheduled" and (
        job.attempts > 0 or job.run_at is None or job.run_at.timestamp() <= now
    ):
        return False
    return not (f.view == "retrying" and job.attempts < 1)


def _search(dash: Dashboard, f: Filters, text: str) -> Found:
    backend = dash.queue.reads
    top = f.cursor
    if top is None:
        newest = backend.newest_job_id()
        if newest is None:
            return Found([], None, 0, SCAN_ROWS)
        top = newest + 1
    floor = max(top - SCAN_ROWS, 1)
    snoozed: set[int] | None = None
    if f.view == "snoozed":
        snoozed, floor = _snoozed_in(dash, f, floor, top)
    checks = f.view is not None and VIEWS[f.view][1]
    flt = JobFilter(
        status=f.status,
        type=f.type,
        queue=f.queue,
        error_code=f.error_code,
        before_id=top,
        limit=SCAN_ROWS if checks else f.limit + 1,
    )
    rows = backend.search_jobs(flt, text, floor)
    if snoozed is not None:
        rows = [j for j in rows if j.id in snoozed]
    elif checks:
        now = dash.queue.clock()
        rows = [j for j in rows if _in_view(j, f, now)]
    if len(rows) > f.limit:
        rows = rows[: f.limit]
        return Found(rows, rows[-1].id, top - floor, SCAN_ROWS)
    return Found(rows, floor if floor > 1 else None, top - floor, SCAN_ROWS)


def running(
    dash: Dashboard,
    limit: int,
    *,
    type: str | None = None,
    queue: str | None = None,
    error_code: str | None = None,
    before_id: int | None = None,
) -> tuple[list[Job], int | None]:
    """Running jobs, newest first, from the running jobs' own index (``ids_matching_running``)
    rather than a walk of the whole table looking for them; and the next page's cursor."""
    backend = dash.queue.reads
    ids = backend.match_ids("running", type=type, queue=queue, error_code=error_code)
    ids = sorted((i for i in ids if before_id is None or i < before_id), reverse=True)
    jobs = [j for j in (backend.get_job(i) for i in ids[:limit]) if j is not None]
    return jobs, (jobs[-1].id if len(ids) > limit and jobs else None)


def find(dash: Dashboard, f: Filters) -> Found:
    q = dash.queue
    exact = {"status": f.status, "type": f.type, "queue": f.queue, "error_code": f.error_code}
    if f.text is not None:
        return _search(dash, f, f.text)
    if f.status == "running":
        rows, next_id = running(
            dash,
            f.limit,
            type=f.type,
            queue=f.queue,
            error_code=f.error_code,
            before_id=f.cursor,
        )
        return Found(rows, next_id, None, SCAN_ROWS)
    if f.view == "snoozed":
        return _snoozed(dash, f)
    if not f.bounded:
        # One more than asked: a next page exists only if that one came back.
        rows = q.jobs(**exact, limit=f.limit + 1, before_id=f.cursor)
        more = len(rows) > f.limit
        rows = rows[: f.limit]
        return Found(rows, rows[-1].id if more and rows else None, None, SCAN_ROWS)
    now = q.clock()
    found: list[Job] = []
    scanned = 0
    cursor = f.cursor
    exhausted = False
    while scanned < SCAN_ROWS and len(found) <= f.limit:
        asked = min(BATCH, SCAN_ROWS - scanned)
        batch = q.jobs(**exact, limit=asked, before_id=cursor)
        for job in batch:
            scanned += 1
            cursor = job.id
            if _in_view(job, f, now):
                found.append(job)
                if len(found) > f.limit:
                    break
        if len(batch) < asked and len(found) <= f.limit:
            exhausted = True
            break
    if len(found) > f.limit:
        found = found[: f.limit]
        next_cursor: int | None = found[-1].id
    else:
        next_cursor = None if exhausted else cursor
    return Found(found, next_cursor, scanned, SCAN_ROWS)
