"""The operator's job edits and schedule switches (issue #25), JSON and HTML: delete, run now
and priority for one job, for a filter (bulk, with ``dry_run``) or for the ticked rows of a
list; disable, enable and run now for a periodic schedule.

Every handler here is a mutation: ``app.guarded`` has checked authentication, read-only mode
(403; a JSON ``dry_run`` that only counts is let through), the Origin and CSRF before it runs,
so a refused request changes nothing. The HTML forms answer with a redirect (303) to a page
that says what happened (Post/Redirect/Get). The database calls run in a worker thread.
"""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING, Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response

from ..client import bulk
from ..core import validate
from ..errors import InvalidTransitionError
from . import api, params

if TYPE_CHECKING:
    from .common import Dashboard

log = logging.getLogger("errands.web")
EDITS = ("delete", "run_now", "priority")  # the job edits (bulk.SELECTABLE keys)
MAX_BULK_IDS = 10_000  # ids one JSON bulk call may name (a filter has no such cap)
RESULT = {"delete": "deleted", "run_now": "due_now", "priority": "priority_changed"}


def priority_of(fields: Any) -> int:
    """``priority``: a whole number within 32 bits, negative too (a JSON number or form text)."""
    value = fields.get("priority")
    lo, hi = validate.PRIORITY_RANGE
    if isinstance(value, str) and re.fullmatch(r"\s*-?[0-9]{1,11}\s*", value):
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise params.BadParameter(f"priority must be a whole number from {lo} to {hi}")
    return value


def act(
    dash: Dashboard,
    action: str,
    ids: list[int],
    priority: int | None,
    selected_by: dict[str, Any] | None = None,
) -> bulk.BulkReport:
    """One edit over ``ids`` (fenced per job: one that moved on is refused, never forced)."""
    return dash.queue.act(
        action, ids, actor=api.actor(), priority=priority, selected_by=selected_by
    )


def _one(dash: Dashboard, action: str, job_id: int, priority: int | None) -> None:
    report = act(dash, action, [job_id], priority)
    why = report.refused.get(job_id)
    if why == "no such job":
        raise api.not_found(job_id)
    if why is not None:
        raise InvalidTransitionError(f"job {job_id}: {why}")


def _path_id(request: Request) -> int:
    job_id = params.job_id(request.path_params["job_id"])
    if job_id is None:
        raise api.not_found(request.path_params["job_id"])
    return job_id


# -- JSON: one job -----------------------------------------------------------------------------


async def _api_one(request: Request, dash: Dashboard, action: str) -> Response:
    job_id = _path_id(request)
    body = await api.json_body(request)
    priority = priority_of(body) if action == "priority" else None
    await run_in_threadpool(_one, dash, action, job_id, priority)
    out: dict[str, Any] = {"id": job_id, "result": RESULT[action]}
    if priority is not None:
        out["priority"] = priority
    return JSONResponse(out)


async def api_delete(request: Request, dash: Dashboard) -> Response:
    return await _api_one(request, dash, "delete")


async def api_run_now(request: Request, dash: Dashboard) -> Response:
    return await _api_one(request, dash, "run_now")


async def api_priority(request: Request, dash: Dashboard) -> Response:
    return await _api_one(request, dash, "priority")


# -- JSON: bulk (a list of ids, or filters as /retry and /cancel take) ---------------------------


def _ids(body: dict[str, Any]) -> list[int]:
    raw = body["ids"]
    if not isinstance(raw, list) or not raw:
        raise params.BadParameter("ids must be a non-empty list of job ids")
    if len(raw) > MAX_BULK_IDS:
        raise params.BadParameter(f"ids: at most {MAX_BULK_IDS:,} at once; use filters")
    ids = [params.job_id(i) for i in raw]
    if any(i is None for i in ids):
        raise params.BadParameter("ids must be job ids (whole numbers from 1 to 2**63-1)")
    return [i for i in ids if i is not None]


def run_edit(
    dash: Dashboard, action: str, body: dict[str, Any], priority: int | None, dry_run: bool
) -> dict[str, Any]:
    filters = None
    if "ids" in body:
        if any(k in body for k in ("status", "type", "queue", "error_code")):
            raise params.BadParameter("give ids or filters (status, type…), not both")
        ids = _ids(body)
    else:
        filters = api.bulk_filters(body, bulk.SELECTABLE[action])
        rest = {k: v for k, v in filters.items() if k != "status"}
        ids = dash.queue.select_jobs(action, filters["status"], **rest)
    if dry_run:
        return {"selected": len(ids), "changed": 0, "refused": {}, "skipped": 0, "dry_run": True}
    report = act(dash, action, ids, priority, filters)
    log.info(
        "bulk %s by %s: %d selected, %d changed", action, api.actor(), len(ids), len(report.changed)
    )
    return {
        "selected": report.selected,
        "changed": len(report.changed),
        "skipped": report.skipped,
        "refused": {str(k): v for k, v in report.refused.items()},
        "dry_run": False,
    }


async def _api_bulk(request: Request, dash: Dashboard, action: str) -> Response:
    body = await api.json_body(request)
    dry_run = params.flag(body, "dry_run")
    priority = priority_of(body) if action == "priority" else None
    out = await run_in_threadpool(run_edit, dash, action, body, priority, dry_run)
    return JSONResponse(out)


async def api_bulk_delete(request: Request, dash: Dashboard) -> Response:
    return await _api_bulk(request, dash, "delete")


async def api_bulk_run_now(request: Request, dash: Dashboard) -> Response:
    return await _api_bulk(request, dash, "run_now")


async def api_bulk_priority(request: Request, dash: Dashboard) -> Response:
    return await _api_bulk(request, dash, "priority")


# -- HTML: the job page's buttons ----------------------------------------------------------------


async def _page_one(request: Request, dash: Dashboard, action: str) -> Response:
    job_id = _path_id(request)
    fields = request.state.form
    priority = priority_of(fields) if action == "priority" else None
    await run_in_threadpool(_one, dash, action, job_id, priority)
    if action == "delete":  # its page is gone: the list says what happened
        target = request.url_for("jobs").include_query_params(deleted=job_id)
    else:  # the job's page, saying what was done
        target = request.url_for("job", job_id=job_id).include_query_params(done=action)
    return RedirectResponse(target, status_code=303)


async def page_delete(request: Request, dash: Dashboard) -> Response:
    return await _page_one(request, dash, "delete")


async def page_run_now(request: Request, dash: Dashboard) -> Response:
    return await _page_one(request, dash, "run_now")


async def page_priority(request: Request, dash: Dashboard) -> Response:
    return await _page_one(request, dash, "priority")


# -- periodic schedules ------------------------------------------------------------------------


def switch(dash: Dashboard, action: str, name: str) -> dict[str, Any]:
    q = dash.queue
    if action == "run":
        job_id = q.run_periodic(name, actor=api.actor())
        return {"name": name, "result": "enqueued", "id": job_id}
    if action == "disable":
        done = q.disable_periodic(name, actor=api.actor())
        return {"name": name, "result": "disabled" if done else "already_disabled"}
    done = q.enable_periodic(name, actor=api.actor())
    return {"name": name, "result": "enabled" if done else "already_enabled"}


def _name(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise params.BadParameter("name is required: the schedule's name")
    if len(value) > 1000:
        raise params.BadParameter("name is longer than 1000 characters")
    return value


async def _api_switch(request: Request, dash: Dashboard, action: str) -> Response:
    out = await run_in_threadpool(switch, dash, action, _name(request.path_params["name"]))
    return JSONResponse(out)


async def api_periodic_disable(request: Request, dash: Dashboard) -> Response:
    return await _api_switch(request, dash, "disable")


async def api_periodic_enable(request: Request, dash: Dashboard) -> Response:
    return await _api_switch(request, dash, "enable")


async def api_periodic_run(request: Request, dash: Dashboard) -> Response:
    return await _api_switch(request, dash, "run")


async def _page_switch(request: Request, dash: Dashboard, action: str) -> Response:
    name = _name(request.state.form.get("name"))
    out = await run_in_threadpool(switch, dash, action, name)
    target = request.url_for("periodic")
    if action == "run":
        target = target.include_query_params(ran=out["id"])
    else:
        target = target.include_query_params(switched=action, schedule=name)
    return RedirectResponse(target, status_code=303)


async def page_periodic_disable(request: Request, dash: Dashboard) -> Response:
    return await _page_switch(request, dash, "disable")


async def page_periodic_enable(request: Request, dash: Dashboard) -> Response:
    return await _page_switch(request, dash, "enable")


async def page_periodic_run(request: Request, dash: Dashboard) -> Response:
    return await _page_switch(request, dash, "run")
