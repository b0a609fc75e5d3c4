"""The operator activity log, read: ``GET /api/admin/activity`` (JSON, newest first) and the
``/activity`` page (docs/dashboard.md, "Activity"). Both take ``actor``, ``action`` (exact
names), ``limit`` and ``cursor`` (the ``next_cursor`` of the page before)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..core.records import ActivityEntry
from . import pages, params

if TYPE_CHECKING:
    from .common import Dashboard


@dataclass(frozen=True, slots=True)
class Found:
    """A page of the log and the cursor of the next (None: this was the last)."""

    entries: list[ActivityEntry]
    next_cursor: int | None


def find(dash: Dashboard, query: Any) -> Found:
    limit = params.limit(query)
    rows = dash.queue.activity(
        limit=limit + 1,  # one more: whether an older page exists
        before=params.cursor(query),
        actor=params.text(query, "actor"),
        action=params.text(query, "action"),
    )
    more = len(rows) > limit
    rows = rows[:limit]
    return Found(rows, rows[-1].id if more and rows else None)


async def api_activity(request: Request, dash: Dashboard) -> Response:
    found = await run_in_threadpool(find, dash, request.query_params)
    return JSONResponse(
        {
            "activity": [e.to_dict() for e in found.entries],
            "next_cursor": None if found.next_cursor is None else str(found.next_cursor),
        }
    )


async def page(request: Request, dash: Dashboard) -> Response:
    query = request.query_params
    found = await run_in_threadpool(find, dash, query)
    actors, actions = await run_in_threadpool(dash.queue.reads.activity_choices)
    filters = {"actor": params.text(query, "actor"), "action": params.text(query, "action")}
    next_url = None
    if found.next_cursor is not None:
        kept = {k: v for k, v in filters.items() if v}
        next_url = request.url_for("activity").include_query_params(
            **kept, cursor=found.next_cursor
        )
    context = {
        "page": "activity",
        "entries": found.entries,
        "filters": filters,
        "actors": actors,
        "actions": actions,
        "next_url": next_url,
        "first_page": params.cursor(query) is None,
    }
    return pages.render(request, dash, "activity.html", context)
