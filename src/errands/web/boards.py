"""The operator's boards: the overview (counts, charts over 24 h or 7 d, the five questions),
failures (every error group, paged, without cancellations), queues,
periodic schedules (with "run now") and workers (with the jobs each holds). Rendered by
``pages.render``; the one action here (run a schedule now) answers 303 like every other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import URL
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response

from .. import order, reports
from ..core import rollup
from . import api, charts, pages, params, search

if TYPE_CHECKING:
    from .common import Dashboard

FAILURE_WINDOWS = ("1h", "24h", "7d")
FAILURE_PAGE = 50  # groups per page of /failures and /api/admin/errors (the total is shown)
MAX_GROUPS = 100_000  # error groups read for /failures: (code, type) pairs, not jobs
CANCELLED_PREFIX = "CANCELLED:"  # an operator's or upstream's decision, not a failure


def failures_only(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Error groups without the cancellations (``CANCELLED:*``): cancelling is a decision,
    not a failure, and a failed-job retry never matches those jobs."""
    return [r for r in rows if not str(r["error_code"]).startswith(CANCELLED_PREFIX)]


WEEK_TTL = 60.0  # seconds the 7-day figures are kept between refreshes (common.cached)


def _failure_groups(dash: Dashboard, since: float, keep: bool) -> dict[str, Any]:
    def read() -> list[dict[str, Any]]:
        return dash.queue.errors(top=MAX_GROUPS, since=since)

    # Kept only for the named windows (1h, 24h, 7d): any other duration is computed each time,
    # so no one can fill the memory with keys.
    rows = dash.cached(f"errors:{since}", WEEK_TTL, read) if keep and since > 86400 else read()
    groups = failures_only(rows)
    cancelled = sum(r["count"] for r in rows if r not in groups)
    return {"groups": groups, "cancelled": cancelled}


@dataclass(frozen=True, slots=True)
class FailureFilters:
    """The failures' filters, the same on ``/failures`` and ``/api/admin/errors``: ``window``
    (a duration: 1h, 24h, 7d or ``<n>[smhdw]`` up to 90 days; ``since`` is its older name,
    still taken), ``page`` and ``top``: groups a page, 1-100 (50 unless given; docs/dashboard.md's
    ``/api/admin/errors?top=N`` is the N largest groups, page 1)."""

    window: str
    seconds: float
    page: int
    top: int | None

    @property
    def size(self) -> int:
        return self.top or FAILURE_PAGE

    def kept(self) -> dict[str, Any]:
        """The filters, as query parameters for links (``top`` only when given)."""
        return {"window": self.window, **({"top": self.top} if self.top else {})}


def failure_filters(query: Any) -> FailureFilters:
    name = "window"
    if not query.get("window") and query.get("since"):
        name = "since"  # the older name of the API's window, kept for scripts
    elif query.get("window") and query.get("since") and query["window"] != query["since"]:
        raise params.BadParameter("give window (or its older name since), not both")
    chosen = query.get(name) or "24h"
    seconds = params.window(query, name)
    number = params.integer(query, "page", default=1, low=1, high=1_000_000) or 1
    top = params.integer(query, "top", default=None, low=1, high=100)
    return FailureFilters(str(chosen), seconds, number, top)


def failure_page(dash: Dashboard, f: FailureFilters) -> dict[str, Any]:
    """The groups of one page of failures (without cancellations), with the totals."""
    data = _failure_groups(dash, f.seconds, f.window in params.WINDOWS)
    every = data["groups"]
    size = f.size
    page_count = max(-(-len(every) // size), 1)
    number = min(f.page, page_count)
    shown = every[(number - 1) * size : number * size]
    return {
        "groups": shown,
        "page": number,
        "pages": page_count,
        "total_groups": len(every),
        "total_jobs": sum(r["count"] for r in every),
        "cancelled": data["cancelled"],
    }


async def api_errors(request: Request, dash: Dashboard) -> Response:
    """``GET /api/admin/errors``: the rows of ``/failures`` with the same query string."""
    f = failure_filters(request.query_params)
    got = await run_in_threadpool(failure_page, dash, f)
    body = {
        "errors": got["groups"],
        "window": f.window,
        "since_seconds": f.seconds,
        **{k: got[k] for k in ("page", "pages", "total_groups", "total_jobs", "cancelled")},
    }
    return JSONResponse(body)


SAMPLE_CHARS = 200  # of a group's newest message, on the Failures page


def _samples(dash: Dashboard, groups: list[dict[str, Any]]) -> list[dict[str, Any] | None]:
    """Each shown group's newest finished job and the start of its message (one index step
    each: the page shows at most FAILURE_PAGE groups)."""
    out: list[dict[str, Any] | None] = []
    for g in groups:
        found = dash.queue.reads.error_sample(g["error_code"], g["type"])
        if found is not None and found["error_detail"]:
            found["error_detail"] = str(found["error_detail"])[:SAMPLE_CHARS]
        out.append(found)
    return out


async def failures(request: Request, dash: Dashboard) -> Response:
    f = failure_filters(request.query_params)
    got = await run_in_threadpool(failure_page, dash, f)
    number, page_count = got["page"], got["pages"]
    samples = await run_in_threadpool(_samples, dash, got["groups"])
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
        for r, sample in zip(got["groups"], samples, strict=True)
    ]

    def page_url(n: int) -> URL:
        return request.url_for("failures").include_query_params(**f.kept(), page=n)

    return pages.render(
        request,
        dash,
        "failures.html",
        {
            "page": "failures",
            "groups": groups,
            "window": f.window,
            "windows": FAILURE_WINDOWS,
            "total_groups": got["total_groups"],
            "total_jobs": got["total_jobs"],
            "first_index": (number - 1) * f.size + 1,
            "page_number": number,
            "page_count": page_count,
            "prev_url": page_url(number - 1) if number > 1 else None,
            "next_url": page_url(number + 1) if number < page_count else None,
            "cancelled": got["cancelled"],
            "cancelled_url": request.url_for("jobs").include_query_params(status="cancelled"),
            "api_url": request.url_for("api_errors").include_query_params(**f.kept(), page=number),
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
    backend = q.reads
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
    # Flow control (docs/flow-control.md): every queue's pause state, by whom, since when and why.
    for name in per:
        per[name]["paused"] = False
    for info in q.queues():
        if info.paused:
            entry(info.name).update(
                paused=True, paused_by=info.paused_by, paused_at=info.paused_at, reason=info.reason
            )
    return [per[name] for name in sorted(per)]


# Fair values shown on the queues page (most due first); the rest: `errands fair`.
FAIR_SHOWN = 50


def _flow_order_data(dash: Dashboard) -> dict[str, Any]:
    """The queues page's fair share (each value's due, queued, running and recent starts)
    and the ordered keys a failed head holds back (docs/flow-control.md)."""
    q = dash.queue
    fair = sorted(q.fairness(), key=lambda f: (-f.due, f.key, f.value))
    return {
        "fairness": fair[:FAIR_SHOWN],
        "fair_more": max(len(fair) - FAIR_SHOWN, 0),
        "blocked": order.blocked_heads(q.reads, q.clock()),
    }


async def queues(request: Request, dash: Dashboard) -> Response:
    rows = await run_in_threadpool(_queues_data, dash)
    caps = await run_in_threadpool(dash.queue.limits)
    flow = await run_in_threadpool(_flow_order_data, dash)
    context = {
        "page": "queues",
        "queues": rows,
        "limits": caps,
        "limit_done": _limit_done(request.query_params),
        **flow,
    }
    return pages.render(request, dash, "queues.html", context)


# What a limit form did (``?limit=``, after the redirect): fixed words, the key shown as text.
LIMIT_DONE = {
    "set": "stored: it wins over the code's until cleared",
    "cleared": "cleared: the code's limit applies again",
    "not_set": "had no stored limit; nothing to clear",
}


def _limit_done(query: Any) -> dict[str, str] | None:
    what = LIMIT_DONE.get(query.get("limit", ""))
    key = params.text(query, "key")
    return None if what is None or key is None else {"key": key, "what": what}


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
    await run_in_threadpool(partial(dash.queue.pause, name, reason=reason, actor=api.actor()))
    return RedirectResponse(request.url_for("queues"), status_code=303)


async def resume_queue(request: Request, dash: Dashboard) -> Response:
    name = _queue_name(request.state.form)
    await run_in_threadpool(partial(dash.queue.resume, name, actor=api.actor()))
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
    # The overview's one "unhandled" line links here: each queued (queue, type) no live
    # worker runs, from the kept counts (no pass over the queued jobs).
    unhandled = [
        {"queue": r.queue, "type": r.type, "queued": r.count}
        for r in sorted(dash.queue.reads.state_counts(), key=lambda r: (r.queue, r.type))
        if r.status == "queued"
        and r.count
        and not any(reports.handles(w, r.queue, r.type) for w in rows)
    ]
    return {"workers": rows, "held": held, "orphans": orphans, "unhandled": unhandled}


async def workers(request: Request, dash: Dashboard) -> Response:
    data = await run_in_threadpool(_workers_data, dash)
    return pages.render(request, dash, "workers.html", {"page": "workers", **data})


CHART_WINDOWS = {"24h": 24, "7d": 168}
A = TypeVar("A")
B = TypeVar("B")


@dataclass(frozen=True, slots=True)
class ChartFilters:
    """The charts' filters, the same on the overview and ``/api/admin/charts``: ``window``
    (24h or 7d), ``type`` and ``queue`` (exact names; either, both or neither)."""

    window: str
    type: str | None
    queue: str | None

    @property
    def hours(self) -> int:
        return CHART_WINDOWS[self.window]

    def kept(self) -> dict[str, str]:
        """The filters given, as query parameters (for links)."""
        out = {"window": self.window, "type": self.type, "queue": self.queue}
        return {k: v for k, v in out.items() if v is not None}


def chart_filters(query: Any) -> ChartFilters:
    chosen = query.get("window") or "24h"
    if chosen not in CHART_WINDOWS:
        raise params.BadParameter(
            f"window must be one of {', '.join(CHART_WINDOWS)}; got {chosen!r:.40}"
        )
    return ChartFilters(chosen, params.text(query, "type"), params.text(query, "queue"))


def chart_series(
    dash: Dashboard, f: ChartFilters
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(finished per hour, wait/run p50/p95 per hour) for the filters. All jobs, or one queue:
    the minute figures (every attempt's run). One type (and queue): its rows still kept plus
    the hourly rollup of its pruned ones (each job once: its last attempt). The 7-day figures
    are kept a minute; for a type or queue only when something of it finished in the week, so
    hostile names (which match nothing) cannot fill the memory."""
    q = dash.queue
    now = q.clock()

    def read() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        if f.type is not None:
            return reports.hourly_of_type(q.reads, now, f.hours, f.type, f.queue)
        return (
            reports.hourly_throughput(q.reads, now, f.hours, f.queue),
            reports.hourly_latency(q.reads, now, f.hours, f.queue),
        )

    if f.hours <= 24:
        return read()
    key = f"hours:{f.hours}:{f.type!r}:{f.queue!r}"
    if f.type is None and f.queue is None:
        return dash.cached(key, WEEK_TTL, read)
    got = dash.cached(key, WEEK_TTL, read)
    if not any(h["succeeded"] or h["failed"] or h["cancelled"] for h in got[0]):
        dash.forget(key)
    return got


def _overview_stats(dash: Dashboard) -> dict[str, Any]:
    figures = dash.queue.stats(top=20)
    figures["top_errors"] = failures_only(figures["top_errors"])[:6]
    return figures


async def _both(first: Callable[[], A], second: Callable[[], B]) -> tuple[A, B]:
    """Two reads at once, each in a worker thread of the pool every handler uses (their
    connections are the pool threads' own): the page waits for the slower, not the sum. The
    first error of either is raised as itself (not an exception group), so the app's error
    pages still answer it."""
    done: dict[int, Any] = {}
    failed: list[BaseException] = []

    async def run(slot: int, fn: Callable[[], Any]) -> None:
        try:
            done[slot] = await run_in_threadpool(fn)
        except Exception as exc:  # kept and raised below, as itself
            failed.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(run, 0, first)
        tg.start_soon(run, 1, second)
    if failed:
        raise failed[0]
    return done[0], done[1]


def _overview_data(
    figures: dict[str, Any],
    series: list[dict[str, Any]],
    latency: list[dict[str, Any]],
    f: ChartFilters,
) -> dict[str, Any]:
    rows = figures["by_queue_type"]
    return {
        "stats": figures,
        "throughput_chart": charts.throughput(series),
        "failure_chart": charts.failure_rate(series),
        "wait_chart": charts.latency(latency, "wait"),
        "run_chart": charts.latency(latency, "run"),
        "counts_chart": charts.counts(figures["counts"]),
        "finished": sum(h["succeeded"] + h["failed"] + h["cancelled"] for h in series),
        "types": sorted({r["type"] for r in rows} | ({f.type} if f.type else set())),
        "queues": sorted({r["queue"] for r in rows} | ({f.queue} if f.queue else set())),
    }


async def overview(request: Request, dash: Dashboard) -> Response:
    f = chart_filters(request.query_params)
    # The figures and the charts are independent reads: on the first (uncached) view of a
    # type's week each costs about as much as the other (BENCHMARKS.md).
    figures, (series, latency) = await _both(
        partial(_overview_stats, dash), partial(chart_series, dash, f)
    )
    data = _overview_data(figures, series, latency, f)
    here = request.url_for("overview")
    context = {
        "page": "overview",
        "window": f.window,
        "windows": CHART_WINDOWS,
        "f": f,
        "window_urls": {
            w: here.include_query_params(**{**f.kept(), "window": w}) for w in CHART_WINDOWS
        },
        "charts_api_url": request.url_for("api_charts").include_query_params(**f.kept()),
        **data,
    }
    return pages.render(request, dash, "overview.html", context)


def charts_body(dash: Dashboard, f: ChartFilters) -> dict[str, Any]:
    """``GET /api/admin/charts``: the overview's four charts as numbers, one entry per hour."""
    series, latency = chart_series(dash, f)
    return {
        "window": f.window,
        "type": f.type,
        "queue": f.queue,
        "hours": [{**s, **lat} for s, lat in zip(series, latency, strict=True)],
    }


async def api_charts(request: Request, dash: Dashboard) -> Response:
    f = chart_filters(request.query_params)
    return JSONResponse(await run_in_threadpool(charts_body, dash, f))
