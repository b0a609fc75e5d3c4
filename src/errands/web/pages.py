"""The HTML pages and their form actions.

Each page gathers its data in one function run in a worker thread, then renders a Jinja2
template with autoescaping: every value that comes from a job is text, never markup. Form
actions (retry, cancel, bulk, prune) reach here only after ``app.guarded`` checked the session's
CSRF token; they answer with a redirect (303) back to a page, or a page saying what happened.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ..client import bulk
from ..errors import JobNotFoundError
from . import api, charts, params
from .security import SESSION_COOKIE, SESSION_MAX_AGE

if TYPE_CHECKING:
    from .common import Dashboard

PREVIEW_CHARS = 4000  # payload/result shown inline; the rest is a download away
FAILURE_WINDOWS = ("1h", "24h", "7d")


def _cookie(response: Response, request: Request, value: str, *, max_age: int) -> None:
    response.set_cookie(
        SESSION_COOKIE,
        value,
        max_age=max_age,
        path=(request.scope.get("root_path") or "") + "/",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )


def render(
    request: Request,
    dash: Dashboard,
    name: str,
    context: dict[str, Any],
    *,
    status_code: int = 200,
    session: bool = True,
) -> Response:
    """Render a page; give the browser a session (for the forms' CSRF token) if it has none.
    ``session=False`` (the login page) never does: in token mode a session *is* the login."""
    sid = dash.guard.session_id(request)
    cookie = None
    if sid is None and session:
        sid, cookie = dash.guard.new_session()
    ctx = {
        "dash": dash,
        "title": dash.title,
        "read_only": dash.read_only,
        "csrf": dash.guard.csrf_token(sid) if sid else "",
        "logged_in": dash.guard.uses_login and sid is not None,
        "now": datetime.now(UTC),
        "page": "",
        **context,
    }
    response = dash.templates.TemplateResponse(request, name, ctx, status_code=status_code)
    if cookie is not None:
        _cookie(response, request, cookie, max_age=SESSION_MAX_AGE)
    return response


def preview(value: Any) -> tuple[str, bool]:
    """JSON pretty-printed and cut to PREVIEW_CHARS; (text, was it cut)."""
    text = json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)
    return text[:PREVIEW_CHARS], len(text) > PREVIEW_CHARS


# -- login ---------------------------------------------------------------------------------


async def login_form(request: Request, dash: Dashboard) -> Response:
    if not dash.guard.uses_login:
        return RedirectResponse(request.url_for("overview"), status_code=303)
    return render(request, dash, "login.html", {"error": None}, session=False)


async def login(request: Request, dash: Dashboard) -> Response:
    if not dash.guard.uses_login:
        return RedirectResponse(request.url_for("overview"), status_code=303)
    submitted = request.state.form.get("token", "")
    if not dash.guard.token_ok(submitted):
        return render(
            request,
            dash,
            "login.html",
            {"error": "That token is not right."},
            status_code=401,
            session=False,
        )
    _, cookie = dash.guard.new_session()
    response = RedirectResponse(request.url_for("overview"), status_code=303)
    _cookie(response, request, cookie, max_age=SESSION_MAX_AGE)
    return response


async def logout(request: Request, dash: Dashboard) -> Response:
    target = "login" if dash.guard.uses_login else "overview"
    response = RedirectResponse(request.url_for(target), status_code=303)
    _cookie(response, request, "", max_age=0)
    return response


# -- reading -------------------------------------------------------------------------------


def _overview_data(dash: Dashboard) -> dict[str, Any]:
    q = dash.queue
    stats = q.stats()
    series = q.throughput(hours=24)
    return {
        "stats": stats,
        "throughput_chart": charts.throughput(series),
        "failure_chart": charts.failure_rate(series),
        "counts_chart": charts.counts(stats["counts"]),
        "finished_24h": sum(h["succeeded"] + h["failed"] + h["cancelled"] for h in series),
    }


async def overview(request: Request, dash: Dashboard) -> Response:
    data = await run_in_threadpool(_overview_data, dash)
    return render(request, dash, "overview.html", {"page": "overview", **data})


async def jobs(request: Request, dash: Dashboard) -> Response:
    query = request.query_params
    rows, next_id = await run_in_threadpool(api.list_jobs, dash, query)
    filters = {
        "status": params.status(query) or "",
        "type": params.text(query, "type") or "",
        "queue": params.text(query, "queue") or "",
        "error_code": params.text(query, "error_code") or "",
    }
    kept = {k: v for k, v in filters.items() if v}
    next_url = None
    if next_id is not None:
        next_url = request.url_for("jobs").include_query_params(
            **kept, limit=params.limit(query), cursor=next_id
        )
    bulk_action = None
    if filters["status"] in bulk.RETRYABLE:
        bulk_action = "retry"
    elif filters["status"] in bulk.CANCELLABLE:
        bulk_action = "cancel"
    bulk_url = (
        request.url_for("bulk").include_query_params(action=bulk_action, **kept)
        if bulk_action
        else None
    )
    return render(
        request,
        dash,
        "jobs.html",
        {
            "page": "jobs",
            "jobs": rows,
            "filters": filters,
            "states": params.STATES,
            "next_url": next_url,
            "first_page": params.cursor(query) is None,
            "first_url": request.url_for("jobs").include_query_params(**kept),
            "bulk_action": bulk_action,
            "bulk_url": bulk_url,
        },
    )


def _job_id(request: Request) -> int:
    job_id = params.job_id(request.path_params["job_id"])
    if job_id is None:
        raise api.not_found(request.path_params["job_id"])
    return job_id


async def job(request: Request, dash: Dashboard) -> Response:
    d = await run_in_threadpool(api.job_detail, dash, _job_id(request))
    j = d["job"]
    payload, payload_cut = preview(j.payload)
    result, result_cut = preview(j.result) if j.result is not None else ("", False)
    events = [
        {
            "e": e,
            "detail": "" if e.detail in (None, {}) else json.dumps(e.detail, ensure_ascii=False),
        }
        for e in d["events"]
    ]
    return render(
        request,
        dash,
        "job.html",
        {
            "page": "jobs",
            "job": j,
            "attempts": d["attempts"],
            "events": events,
            "payload": payload,
            "payload_cut": payload_cut,
            "result": result,
            "result_cut": result_cut,
            "can_retry": j.status in bulk.RETRYABLE,
            "can_cancel": j.status in bulk.CANCELLABLE,
        },
    )


def _download(value: Any, filename: str) -> Response:
    body = json.dumps(value, indent=2, ensure_ascii=False).encode()
    return Response(
        body,
        media_type="application/json",
        headers={"content-disposition": f'attachment; filename="{filename}"'},
    )


async def payload(request: Request, dash: Dashboard) -> Response:
    job_id = _job_id(request)
    j = await run_in_threadpool(dash.queue.get, job_id)
    if j is None:
        raise api.not_found(job_id)
    return _download(j.payload, f"job-{job_id}-payload.json")


async def result(request: Request, dash: Dashboard) -> Response:
    job_id = _job_id(request)
    j = await run_in_threadpool(dash.queue.get, job_id)
    if j is None:
        raise api.not_found(job_id)
    return _download(j.result, f"job-{job_id}-result.json")


def _traceback(dash: Dashboard, job_id: int, number: int) -> str | None:
    for a in dash.queue.attempts(job_id):
        if a.attempt == number:
            return dash.queue.traceback(a)
    return None


async def traceback(request: Request, dash: Dashboard) -> Response:
    job_id = _job_id(request)
    number = request.path_params["attempt"]
    text = await run_in_threadpool(_traceback, dash, job_id, number)
    if text is None:
        raise JobNotFoundError(
            f"job {job_id} has no traceback for attempt {number}; see the job's attempts"
        )
    # Plain text (and nosniff on every response): a traceback is never interpreted as markup.
    return Response(text, media_type="text/plain; charset=utf-8")


async def failures(request: Request, dash: Dashboard) -> Response:
    chosen = request.query_params.get("window") or "24h"
    if chosen not in FAILURE_WINDOWS:
        raise params.BadParameter(f"window must be one of {', '.join(FAILURE_WINDOWS)}")
    since = params.WINDOWS[chosen]
    rows = await run_in_threadpool(dash.queue.errors, top=50, since=since)
    groups = [
        {
            **r,
            "retry_url": request.url_for("bulk").include_query_params(
                action="retry", status="failed", type=r["type"], error_code=r["error_code"]
            ),
            "jobs_url": request.url_for("jobs").include_query_params(
                type=r["type"], error_code=r["error_code"]
            ),
        }
        for r in rows
    ]
    return render(
        request,
        dash,
        "failures.html",
        {"page": "failures", "groups": groups, "window": chosen, "windows": FAILURE_WINDOWS},
    )


async def periodic(request: Request, dash: Dashboard) -> Response:
    rows = await run_in_threadpool(api.periodic_rows, dash)
    return render(request, dash, "periodic.html", {"page": "periodic", "schedules": rows})


async def workers(request: Request, dash: Dashboard) -> Response:
    rows = await run_in_threadpool(dash.queue.workers)
    return render(request, dash, "workers.html", {"page": "workers", "workers": rows})


# -- actions -------------------------------------------------------------------------------


async def retry(request: Request, dash: Dashboard) -> Response:
    job_id = _job_id(request)
    await run_in_threadpool(dash.queue.retry, job_id, actor=api.ACTOR)
    return RedirectResponse(request.url_for("job", job_id=job_id), status_code=303)


async def cancel(request: Request, dash: Dashboard) -> Response:
    job_id = _job_id(request)
    await run_in_threadpool(dash.queue.cancel, job_id, actor=api.ACTOR)
    return RedirectResponse(request.url_for("job", job_id=job_id), status_code=303)


def _bulk_action(fields: Any) -> str:
    action = fields.get("action")
    if action not in ("retry", "cancel"):
        raise params.BadParameter("action must be retry or cancel")
    return str(action)


async def _bulk_page(request: Request, dash: Dashboard, fields: Any, dry_run: bool) -> Response:
    action = _bulk_action(fields)
    filters = api.bulk_filters(fields, bulk.SELECTABLE[action])
    report = await run_in_threadpool(api.run_bulk, dash, action, filters, dry_run)
    return render(
        request,
        dash,
        "bulk.html",
        {
            "page": "jobs",
            "action": action,
            "filters": filters,
            "count": report["selected"],
            "done": None if dry_run else report,
        },
    )


async def bulk_confirm(request: Request, dash: Dashboard) -> Response:
    """Step one of a bulk action: how many jobs match, and a form to confirm."""
    return await _bulk_page(request, dash, request.query_params, dry_run=True)


async def bulk_run(request: Request, dash: Dashboard) -> Response:
    return await _bulk_page(request, dash, request.state.form, dry_run=False)


async def _prune_page(request: Request, dash: Dashboard, dry_run: bool) -> Response:
    report = await run_in_threadpool(api.run_prune, dash, dry_run)
    context = {"page": "overview", "report": report, "done": not dry_run}
    return render(request, dash, "prune.html", context)


async def prune_confirm(request: Request, dash: Dashboard) -> Response:
    return await _prune_page(request, dash, dry_run=True)


async def prune_run(request: Request, dash: Dashboard) -> Response:
    return await _prune_page(request, dash, dry_run=False)
