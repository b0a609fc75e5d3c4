"""The operator's boards: the overview (counts, charts over 24 h or 7 d, the five questions),
failures (every error group, paged, without cancellations), queues,
periodic schedules (with "run now") and workers (with the jobs each holds). Rendered by
``pages.render``; the one action here (run a schedule now) answers 303 like every other.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

from starlette.concurrency import run_in_threadpool
from starlette.datastructures import URL
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ..client import reports
from ..core import rollup
from . import api, charts, pages, params, search

if TYPE_CHECKING:
    from .common import Dashboard

FAILURE_WINDOWS = ("1h", "24h", "7d")
FAILURE_PAGE = 50  # groups per page of /failures (the total is always shown)
MAX_GROUPS = 100_000  # error groups read for /failures: (code, type) pairs, not jobs
CANCELLED_PREFIX = "CANCELLED:"  # an operator's or upstream's decision, not a failure


def failures_only(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Error groups without the cancellations (``CANCELLED:*``): cancelling is a decision,
    not a failure, and a failed-job retry never matches those jobs."""
    return [r for r in rows if not str(r["error_code"]).startswith(CANCELLED_PREFIX)]


WEEK_TTL = 60.0  # seconds the 7-day figures are kept between refreshes (common.cached)


def _failure_groups(dash: Dashboard, since: float) -> dict[str, Any]:
    def read() -> list[dict[str, Any]]:
        return dash.queue.errors(top=MAX_GROUPS, since=since)

    rows = dash.cached(f"errors:{since}", WEEK_TTL, read) if since > 86400 else read()
    groups = failures_only(rows)
    cancelled = sum(r["count"] for r in rows if r not in groups)
    return {"groups": groups, "cancelled": cancelled}


SAMPLE_CHARS = 200  # of a group's newest message, on the Failures page


def _samples(dash: Dashboard, groups: list[dict[str, Any]]) -> list[dict[str, Any] | None]:
    """Each shown group's newest finished job and the start of its message (one index step
    each: the page shows at most FAILURE_PAGE groups)."""
    out: list[dict[str, Any] | None] = []
    for g in groups:
        found = dash.queue.backend.error_sample(g["error_code"], g["type"])
        if found is not None and found["error_detail"]:
            found["error_detail"] = str(found["error_detail"])[:SAMPLE_CHARS]
        out.append(found)
    return out


async def failures(request: Request, dash: Dashboard) -> Response:
    query = request.query_params
    chosen = query.get("window") or "24h"
    if chosen not in FAILURE_WINDOWS:
        raise params.BadParameter(f"window must be one of {', '.join(FAILURE_WINDOWS)}")
    number = params.integer(query, "page", default=1, low=1, high=1_000_000) or 1
    data = await run_in_threadpool(_failure_groups, dash, params.WINDOWS[chosen])
    every = data["groups"]
    page_count = max(-(-len(every) // FAILURE_PAGE), 1)
    number = min(number, page_count)
    shown = every[(number - 1) * FAILURE_PAGE : number * FAILURE_PAGE]
    samples = await run_in_threadpool(_samples, dash, shown)
    groups = [
        {
            **r,
            "retry_url": request.url_for("bulk").include_query_params(
                action="retry", status="failed", type=r["type"], error_code=r["error_code"]
            ),
            "jobs_url": request.url_for("jobs").include_query_params(
                type=r["type"], error_code=r["error_code"]
            ),
            "sample": sample,
        }
        for r, sample in zip(shown, samples, strict=True)
    ]

    def page_url(n: int) -> URL:
        return request.url_for("failures").include_query_params(window=chosen, page=n)

    return pages.render(
        request,
        dash,
        "failures.html",
        {
            "page": "failures",
            "groups": groups,
            "window": chosen,
            "windows": FAILURE_WINDOWS,
            "total_groups": len(every),
            "total_jobs": sum(r["count"] for r in every),
            "first_index": (number - 1) * FAILURE_PAGE + 1,
            "page_number": number,
            "page_count": page_count,
            "prev_url": page_url(number - 1) if number > 1 else None,
            "next_url": page_url(number + 1) if number < page_count else None,
            "cancelled": data["cancelled"],
            "cancelled_url": request.url_for("jobs").include_query_params(status="cancelled"),
        },
    )


def _periodic_data(dash: Dashboard) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """The schedules, and each job type's newest error code of the last 24 h (from the error
    figures: one small read, however many jobs): a schedule's "last error"."""
    rows = api.periodic_rows(dash)
    newest: dict[str, dict[str, Any]] = {}
    for e in dash.queue.errors(top=100):
        seen = newest.get(e["type"])
        # None: a job still retrying (newer than any finished one)
        rank = (e["last_seen"] is None, e["last_seen"] or "")
        if seen is None or rank > (seen["last_seen"] is None, seen["last_seen"] or ""):
            newest[e["type"]] = e
    return rows, newest


async def periodic(request: Request, dash: Dashboard) -> Response:
    rows, errors = await run_in_threadpool(_periodic_data, dash)
    query = request.query_params
    ran = None
    if query.get("ran"):
        ran = params.job_id(params.integer(query, "ran", default=None, low=1, high=params.MAX_ID))
    switched = query.get("switched") if query.get("switched") in ("disable", "enable") else None
    context = {
        "page": "periodic",
        "schedules": rows,
        "errors": errors,
        "ran": ran,
        "switched": switched,
        "switched_name": (params.text(query, "schedule") or "") if switched else "",
    }
    return pages.render(request, dash, "periodic.html", context)


def _queues_data(dash: Dashboard) -> list[dict[str, Any]]:
    """Per queue: jobs per state, due jobs and the longest wait, and the last hour's
    throughput, failure rate and wait/run p95 (all from kept figures and index ranges)."""
    q = dash.queue
    now = q.clock()
    backend = q.backend
    per: dict[str, dict[str, Any]] = {}

    def entry(name: str) -> dict[str, Any]:
        return per.setdefault(
            name,
            {"name": name, "counts": dict.fromkeys(params.STATES, 0), "due": 0, "wait": None},
        )

    for r in backend.state_counts():
        entry(r.queue)["counts"][r.status] += r.count
    for name, due in backend.oldest_due_by_queue(now).items():
        entry(name).update(due=due["due"], wait=due["wait_seconds"])
    _, windows = reports.windows(backend.window_rows(now - rollup.HOUR))
    for name, w in windows.items():
        entry(name)["hour"] = reports.summarize(w, rollup.HOUR)
    # Flow control (SPEC 4b): every queue's pause state, by whom, since when and why.
    for name in per:
        per[name]["paused"] = False
    for info in q.queues():
        if info.paused:
            entry(info.name).update(
                paused=True, paused_by=info.paused_by, paused_at=info.paused_at, reason=info.reason
            )
    return [per[name] for name in sorted(per)]


async def queues(request: Request, dash: Dashboard) -> Response:
    rows = await run_in_threadpool(_queues_data, dash)
    caps = await run_in_threadpool(dash.queue.limits)
    context = {"page": "queues", "queues": rows, "limits": caps}
    return pages.render(request, dash, "queues.html", context)


def _queue_name(fields: Any) -> str:
    name = params.text(fields, "name")
    if name is None:
        raise params.BadParameter("name is required: the queue to pause or resume")
    return name


async def pause_queue(request: Request, dash: Dashboard) -> Response:
    """Pause a queue from its page (the form's reason is kept with the pause); then back."""
    fields = request.state.form
    name = _queue_name(fields)
    reason = params.text(fields, "reason")
    await run_in_threadpool(partial(dash.queue.pause, name, reason=reason, actor=api.ACTOR))
    return RedirectResponse(request.url_for("queues"), status_code=303)


async def resume_queue(request: Request, dash: Dashboard) -> Response:
    name = _queue_name(request.state.form)
    await run_in_threadpool(dash.queue.resume, name)
    return RedirectResponse(request.url_for("queues"), status_code=303)


RUNNING_SHOWN = 500  # running jobs read for /workers (the rest: the running view, paged)


def _workers_data(dash: Dashboard) -> dict[str, Any]:
    """Live workers and the jobs each holds now; running jobs whose worker is not live."""
    rows = dash.queue.workers()
    held: dict[str, list[Any]] = {}
    for j in search.running(dash, RUNNING_SHOWN)[0]:
        held.setdefault(j.worker_id or "", []).append(j)
    live = {w["id"] for w in rows}
    orphans = [j for wid, js in held.items() if wid not in live for j in js]
    return {"workers": rows, "held": held, "orphans": orphans}


async def workers(request: Request, dash: Dashboard) -> Response:
    data = await run_in_threadpool(_workers_data, dash)
    return pages.render(request, dash, "workers.html", {"page": "workers", **data})


CHART_WINDOWS = {"24h": 24, "7d": 168}


def _overview_data(dash: Dashboard, hours: int) -> dict[str, Any]:
    q = dash.queue
    figures = q.stats(top=20)
    figures["top_errors"] = failures_only(figures["top_errors"])[:6]

    def read() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        return q.throughput(hours=hours), reports.hourly_latency(q.backend, q.clock(), hours)

    series, latency = dash.cached(f"hours:{hours}", WEEK_TTL, read) if hours > 24 else read()
    return {
        "stats": figures,
        "throughput_chart": charts.throughput(series),
        "failure_chart": charts.failure_rate(series),
        "wait_chart": charts.latency(latency, "wait"),
        "run_chart": charts.latency(latency, "run"),
        "counts_chart": charts.counts(figures["counts"]),
        "finished": sum(h["succeeded"] + h["failed"] + h["cancelled"] for h in series),
    }


async def overview(request: Request, dash: Dashboard) -> Response:
    chosen = request.query_params.get("window") or "24h"
    if chosen not in CHART_WINDOWS:
        raise params.BadParameter(f"window must be one of {', '.join(CHART_WINDOWS)}")
    data = await run_in_threadpool(_overview_data, dash, CHART_WINDOWS[chosen])
    context = {"page": "overview", "window": chosen, "windows": CHART_WINDOWS, **data}
    return pages.render(request, dash, "overview.html", context)
