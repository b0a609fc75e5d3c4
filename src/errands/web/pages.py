"""The HTML pages and their form actions.

Each page gathers its data in one function run in a worker thread, then renders a Jinja2
template with autoescaping: every value that comes from a job is text, never markup. Form
actions (retry, cancel, bulk, prune) reach here only after ``app.guarded`` checked the session's
CSRF token; every one answers with a redirect (303) to a page that says what happened
(Post/Redirect/Get), so reloading that page never sends the action again.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl

from starlette.concurrency import run_in_threadpool
from starlette.datastructures import URL
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ..client import bulk
from ..errors import JobNotFoundError
from . import actions, api, jobview, params, search
from .security import SESSION_COOKIE

if TYPE_CHECKING:
    from .common import Dashboard

PREVIEW_CHARS = 4000  # payload/result shown inline; the rest is a download away


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
        "open_warning": dash.open_warning,
        "csrf": dash.guard.csrf_token(sid) if sid else "",
        "logged_in": dash.guard.uses_login and sid is not None,
        "now": datetime.fromtimestamp(dash.queue.clock(), UTC),
        "page": "",
        **context,
    }
    response = dash.templates.TemplateResponse(request, name, ctx, status_code=status_code)
    if cookie is not None:
        _cookie(response, request, cookie, max_age=dash.guard.session_max_age)
    return response


def preview(value: Any) -> tuple[str, bool]:
    """JSON pretty-printed and cut to PREVIEW_CHARS; (text, was it cut)."""
    text = json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)
    return text[:PREVIEW_CHARS], len(text) > PREVIEW_CHARS


def error_page(request: Request, dash: Dashboard, status: int, message: str) -> Response:
    """A refusal or a missing page, styled like the rest, with a way back."""
    context = {"status": status, "message": message}
    # In token mode a session *is* the login: an error page never starts one.
    return render(
        request, dash, "error.html", context, status_code=status, session=not dash.guard.uses_login
    )


# -- login ---------------------------------------------------------------------------------


def login_url(request: Request) -> URL:
    """The login page, remembering the page asked for (``next``)."""
    asked = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    return request.url_for("login").include_query_params(next=asked)


def safe_next(request: Request, value: Any) -> str:
    """Where to go after logging in: a path inside this dashboard, else the overview (never
    another site: ``//evil.example`` and ``/\\evil.example`` are refused)."""
    root = (request.scope.get("root_path") or "").rstrip("/")
    if (
        isinstance(value, str)
        and len(value) <= 2000
        and value.startswith(root + "/")
        and not value.startswith(("//", "/\\"))
        and "\\" not in value
        and not any(ord(c) < 32 for c in value)
    ):
        return value
    return str(request.url_for("overview"))


async def login_form(request: Request, dash: Dashboard) -> Response:
    if not dash.guard.uses_login:
        return RedirectResponse(request.url_for("overview"), status_code=303)
    context = {"error": None, "next": safe_next(request, request.query_params.get("next"))}
    return render(request, dash, "login.html", context, session=False)


async def login(request: Request, dash: Dashboard) -> Response:
    if not dash.guard.uses_login:
        return RedirectResponse(request.url_for("overview"), status_code=303)
    target = safe_next(request, request.state.form.get("next"))
    submitted = request.state.form.get("token", "")
    label = dash.guard.token_label(submitted)
    if label is None:
        dash.guard.failed(request)
        return render(
            request,
            dash,
            "login.html",
            {"error": "That token is not right.", "next": target},
            status_code=401,
            session=False,
        )
    _, cookie = dash.guard.new_session(label)
    response = RedirectResponse(target, status_code=303)
    _cookie(response, request, cookie, max_age=dash.guard.session_max_age)
    return response


async def logout(request: Request, dash: Dashboard) -> Response:
    """End the session here (a copy of the cookie stops working too), then forget it."""
    dash.guard.revoke(request)
    target = "login" if dash.guard.uses_login else "overview"
    response = RedirectResponse(request.url_for(target), status_code=303)
    _cookie(response, request, "", max_age=0)
    return response


# -- reading -------------------------------------------------------------------------------


def total(dash: Dashboard, f: search.Filters) -> int | None:
    """How many jobs the exact filters match, where the kept counts say it cheaply (status,
    queue and type: index ranges and ``job_counts``); None when only a scan could tell."""
    if f.error_code is not None or f.bounded:
        return None
    return sum(
        r.count
        for r in dash.queue.reads.state_counts()
        if (f.status is None or r.status == f.status)
        and (f.type is None or r.type == f.type)
        and (f.queue is None or r.queue == f.queue)
    )


def _jobs_data(dash: Dashboard, f: search.Filters) -> tuple[search.Found, int | None]:
    return search.find(dash, f), total(dash, f)


async def jobs(request: Request, dash: Dashboard) -> Response:
    f = search.filters(request.query_params)
    found, count = await run_in_threadpool(_jobs_data, dash, f)
    kept = f.kept()
    here = request.url_for("jobs")
    next_url = None
    if found.next_cursor is not None:
        next_url = here.include_query_params(**kept, limit=f.limit, cursor=found.next_cursor)
    # Every verb the status allows, by filter: each link opens the count first (/bulk/confirm).
    exact = {k: v for k, v in kept.items() if k in ("status", "type", "queue", "error_code")}
    bulk_links: list[tuple[str, Any]] = []
    if f.text is None and f.status is not None and f.view in (None, "running", "dead"):
        bulk_links = [
            (
                action,
                request.url_for("bulk").include_query_params(
                    action=action, **{**exact, "status": f.status}
                ),
            )
            for action in SELECTED_ACTIONS
            if f.status in bulk.SELECTABLE[action]
        ]
    return render(
        request,
        dash,
        "jobs.html",
        {
            "page": "jobs",
            "jobs": found.jobs,
            "found": found,
            "total": count,
            "f": f,
            "filters": {k: kept.get(k, "") for k in ("status", "type", "queue", "error_code", "q")},
            "views": search.VIEWS,
            "view_urls": {
                v: here.include_query_params(
                    view=v, **{k: x for k, x in exact.items() if k != "status"}
                )
                for v in search.VIEWS
            },
            "states": params.STATES,
            "next_url": next_url,
            "first_page": f.cursor is None,
            "first_url": here.include_query_params(**kept),
            "api_url": request.url_for("api_jobs").include_query_params(**kept, limit=f.limit),
            "bulk_links": bulk_links,
            "bulk_verbs": BULK_VERBS,
            "acted": _acted(request.query_params),
            "deleted": _deleted(request.query_params),
            "can_select": not dash.read_only,
            "back": str(request.url.path) + (f"?{request.url.query}" if request.url.query else ""),
        },
    )


def _acted(query: Any) -> dict[str, Any] | None:
    """What "act on the selected rows" did, from the address it redirected to."""
    action = query.get("acted")
    if action not in SELECTED_ACTIONS:
        return None
    counts = {
        k: params.integer(query, k, default=0, low=0, high=MAX_SELECTED)
        for k in ("changed", "requested", "skipped")
    }
    return {"action": action, **counts}


def _deleted(query: Any) -> int | None:
    """The job the job page's Delete removed (it has no page left: the list says so)."""
    if not query.get("deleted"):
        return None
    return params.integer(query, "deleted", default=None, low=1, high=params.MAX_ID)


async def find_job(request: Request, dash: Dashboard) -> Response:
    """The header's search box: a job id (``123`` or ``#123``) opens that job; anything else
    searches the list (``/jobs?q=``)."""
    text = (params.text(request.query_params, "q") or "").strip()
    digits = text.removeprefix("#")
    if digits.isdigit() and params.job_id(int(digits)) is not None:
        return RedirectResponse(request.url_for("job", job_id=int(digits)), status_code=303)
    target = request.url_for("jobs")
    if text:
        target = target.include_query_params(q=text)
    return RedirectResponse(target, status_code=303)


def _job_id(request: Request) -> int:
    job_id = params.job_id(request.path_params["job_id"])
    if job_id is None:
        raise api.not_found(request.path_params["job_id"])
    return job_id


async def job(request: Request, dash: Dashboard) -> Response:
    d = await run_in_threadpool(api.job_detail, dash, _job_id(request))
    j = d["job"]
    now = dash.queue.clock()
    payload, payload_cut = preview(j.payload)
    result, result_cut = preview(j.result) if j.result is not None else ("", False)
    events = [{"e": e, "detail": jobview.event_detail(e.detail)} for e in d["events"]]
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
            "can_run_now": jobview.can_run_now(j, now),
            "can_reprioritize": j.status in bulk.REPRIORITIZABLE,
            "can_delete": j.status in bulk.DELETABLE,
            "timeline": jobview.timeline(j, d["attempts"], now),
            # Durable steps (docs/durable-steps.md): name, attempt, duration, result preview.
            "steps": [
                {
                    "s": s,
                    "shown": json.dumps(s.result, ensure_ascii=False)[:120],
                    "took": jobview.step_took(s),
                }
                for s in d["steps"]
            ],
            "pending": jobview.pending_step(d["steps"], j, now),
            "commands": jobview.commands(j, now),
            "notice": jobview.JOB_NOTICES.get(request.query_params.get("done", "")),
            # A job queued again (a retry, a backoff, a snooze) keeps its last attempt's start,
            # worker and progress: the page labels them as that attempt's, not as current.
            "past_attempt": j.attempts if j.status in ("queued", "waiting") else None,
            "deps": {
                **d["deps"],
                # This job's own rule, the same on each of its upstream edges.
                "downstream_rule": next(
                    (u["on_upstream_failure"] for u in d["deps"]["upstream"]), "cancel"
                ),
            },
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


# -- actions -------------------------------------------------------------------------------


def job_done_url(request: Request, job_id: int, done: str) -> URL:
    """The job's page after one of its buttons, saying what was done (``?done=``)."""
    return request.url_for("job", job_id=job_id).include_query_params(done=done)


async def retry(request: Request, dash: Dashboard) -> Response:
    job_id = _job_id(request)
    await run_in_threadpool(dash.queue.retry, job_id, actor=api.actor())
    return RedirectResponse(job_done_url(request, job_id, "retry"), status_code=303)


async def cancel(request: Request, dash: Dashboard) -> Response:
    job_id = _job_id(request)
    what = await run_in_threadpool(dash.queue.cancel, job_id, actor=api.actor())
    done = "cancel" if what == "cancelled" else "cancel_requested"
    return RedirectResponse(job_done_url(request, job_id, done), status_code=303)


async def send_signal(request: Request, dash: Dashboard) -> Response:
    """The job page's "send signal" form: a name and an optional JSON payload (blank: null),
    for a job parked in ``ctx.wait_for`` (docs/durable-steps.md)."""
    job_id = _job_id(request)
    fields = request.state.form
    name = (fields.get("name") or "").strip()
    if not name:
        raise params.BadParameter("name is required: the signal the job waits for")
    raw = (fields.get("payload") or "").strip()
    try:
        value = json.loads(raw) if raw else None
    except ValueError as exc:
        raise params.BadParameter(f"payload must be JSON (or blank for null): {exc}") from None
    # Logged as the JSON API's signal is: an operator's, by hand (docs/operations.md).
    send = partial(dash.queue.signal, job_id, name, value, actor=api.actor(), by_hand=True)
    try:
        await run_in_threadpool(send)
    except ValueError as exc:  # a name or payload errands cannot store
        raise params.BadParameter(str(exc)) from None
    return RedirectResponse(job_done_url(request, job_id, "signal"), status_code=303)


MAX_SELECTED = 500  # ids one "act on the selected rows" may name (one page at most)
SELECTED_ACTIONS = ("retry", "cancel", *actions.EDITS)


async def act_on_selected(request: Request, dash: Dashboard) -> Response:
    """Retry, cancel, delete, run now or reprioritize the rows ticked on a list page: each job
    fenced on its state, so one that moved on is skipped; then back to the list
    (Post/Redirect/Get) saying what happened."""
    raw = (await request.body()).decode("utf-8", errors="replace")
    pairs = parse_qsl(raw, keep_blank_values=True)
    action = _bulk_action(request.state.form, SELECTED_ACTIONS)
    ids: list[int] = []
    for key, value in pairs:
        if key == "id":
            job_id = params.job_id(int(value)) if value.isdigit() and len(value) < 20 else None
            if job_id is None:
                raise params.BadParameter(f"id must be a job id; got {value!r:.40}")
            ids.append(job_id)
    if not ids:
        raise params.BadParameter("tick at least one job, then choose the action")
    if len(ids) > MAX_SELECTED:
        raise params.BadParameter(f"at most {MAX_SELECTED} jobs at once; use a bulk action")
    q = dash.queue
    priority = actions.priority_of(request.state.form) if action == "priority" else None
    report = await run_in_threadpool(
        partial(q.act, action, ids, actor=api.actor(), priority=priority)
    )
    target = URL(safe_next(request, request.state.form.get("back"))).include_query_params(
        acted=action,
        changed=len(report.changed),
        requested=len(report.requested),
        skipped=report.skipped,
    )
    return RedirectResponse(str(target), status_code=303)


def _bulk_action(fields: Any, allowed: tuple[str, ...] = ("retry", "cancel")) -> str:
    action = fields.get("action")
    if action not in allowed:
        raise params.BadParameter(f"action must be {' or '.join(allowed)}")
    return str(action)


DONE_FIELDS = ("changed", "requested", "skipped")
# action -> (the button's verb, what the done line says of the changed jobs)
BULK_VERBS = {
    "retry": ("retry", "retried"),
    "cancel": ("cancel", "cancelled"),
    "delete": ("delete", "deleted, with their attempts and events"),
    "run_now": ("run now", "made due now"),
    "priority": ("reprioritize", "given the new priority"),
}


async def bulk_confirm(request: Request, dash: Dashboard) -> Response:
    """Step one of a bulk action: how many jobs match, and a form to confirm. After the action
    (``done=1``) the same address says what it did, without doing anything again."""
    query = request.query_params
    action = _bulk_action(query, SELECTED_ACTIONS)
    filters = api.bulk_filters(query, bulk.SELECTABLE[action])
    # The new priority may come with the link (a number to start from); it is checked on POST.
    priority = actions.priority_of(query) if action == "priority" and "priority" in query else 0
    done = None
    if params.flag(query, "done"):
        done = {
            k: params.integer(query, k, default=0, low=0, high=params.MAX_ID) for k in DONE_FIELDS
        }
        count = 0
    else:
        report = await run_in_threadpool(api.run_bulk, dash, action, filters, True)
        count = report["selected"]
    return render(
        request,
        dash,
        "bulk.html",
        {
            "page": "jobs",
            "action": action,
            "filters": filters,
            "count": count,
            "done": done,
            "priority": priority,
            "verb": BULK_VERBS[action],
        },
    )


async def bulk_run(request: Request, dash: Dashboard) -> Response:
    fields = request.state.form
    action = _bulk_action(fields, SELECTED_ACTIONS)
    filters = api.bulk_filters(fields, bulk.SELECTABLE[action])
    priority = actions.priority_of(fields) if action == "priority" else None
    report = await run_in_threadpool(api.run_bulk, dash, action, filters, False, priority)
    kept: dict[str, Any] = {k: v for k, v in filters.items() if v}
    if priority is not None:
        kept["priority"] = priority
    counts = {k: report[k] for k in DONE_FIELDS}
    target = request.url_for("bulk").include_query_params(action=action, **kept, done=1, **counts)
    return RedirectResponse(target, status_code=303)


async def prune_confirm(request: Request, dash: Dashboard) -> Response:
    query = request.query_params
    if params.flag(query, "done"):
        deleted = params.integer(query, "deleted", default=0, low=0, high=params.MAX_ID)
        context: dict[str, Any] = {"page": "overview", "report": None, "done": True}
        return render(request, dash, "prune.html", {**context, "deleted": deleted})
    report = await run_in_threadpool(api.run_prune, dash, True)
    context = {"page": "overview", "report": report, "done": False, "deleted": 0}
    return render(request, dash, "prune.html", context)


async def prune_run(request: Request, dash: Dashboard) -> Response:
    report = await run_in_threadpool(api.run_prune, dash, False)
    target = request.url_for("prune").include_query_params(done=1, deleted=report["total"])
    return RedirectResponse(target, status_code=303)
