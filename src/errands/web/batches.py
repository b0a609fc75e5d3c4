"""A batch's page (``/batches/{id}``) and its JSON twin (docs/pipelines.md, docs/dashboard.md).

A batch is its callback job and the members it runs after; its id is the callback's
(``batch.id``). The page shows the members per state, how many had finished over time, the
callback's state, the members themselves (failed first) and "retry failed members", which
retries each failed or cancelled member through ``Queue.act`` (fenced per job: one that moved
on is skipped and counted). A job waiting on one upstream is not a batch and has no page.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response

from ..client import bulk
from ..core.records import Job
from ..errors import JobNotFoundError
from . import api, charts, pages, params

if TYPE_CHECKING:
    from .common import Dashboard

MEMBERS_SHOWN = 200  # member rows on the page (the counts are always whole)
FINAL = ("succeeded", "failed", "cancelled")


def batch_id(request: Request) -> int:
    job_id = params.job_id(request.path_params["job_id"])
    if job_id is None:
        raise api.not_found(request.path_params["job_id"])
    return job_id


def members(dash: Dashboard, callback_id: int) -> list[Job]:
    """The jobs a batch's callback runs after, in id order (raises for no batch)."""
    found = [job for job, _rule in dash.queue.reads.upstream(callback_id)]
    if not found:
        raise JobNotFoundError(
            f"job {callback_id} runs after no job, so it is no batch (a batch's id is its "
            "callback job's id, batch.id)"
        )
    return found


def batch_data(dash: Dashboard, callback_id: int) -> dict[str, Any]:
    """The batch as the page and the JSON show it."""
    info = dash.queue.get_batch(callback_id)
    jobs = members(dash, callback_id)
    callback = dash.queue.get(callback_id)
    assert callback is not None  # get_batch found it
    now = dash.queue.clock()
    finished = sorted(
        j.finished_at.timestamp() for j in jobs if j.finished_at and j.status in FINAL
    )
    started = min((j.created_at.timestamp() for j in jobs if j.created_at), default=now)
    return {
        "info": info,
        "callback": callback,
        "members": jobs,
        "retryable": [j.id for j in jobs if j.status in bulk.RETRYABLE],
        "finished_times": finished,
        "started": started,
        "now": now,
    }


def _shown(jobs: list[Job]) -> list[Job]:
    """Failed and cancelled members first (what an operator looks for), then the rest."""
    order = {"failed": 0, "cancelled": 1, "running": 2}
    return sorted(jobs, key=lambda j: (order.get(j.status, 3), j.id))[:MEMBERS_SHOWN]


async def page(request: Request, dash: Dashboard) -> Response:
    callback_id = batch_id(request)
    d = await run_in_threadpool(batch_data, dash, callback_id)
    info = d["info"]
    retried = None
    if request.query_params.get("retried") is not None:
        retried = {
            k: params.integer(request.query_params, k, default=0, low=0, high=params.MAX_ID)
            for k in ("retried", "skipped")
        }
    return pages.render(
        request,
        dash,
        "batch.html",
        {
            "page": "jobs",
            "info": info,
            "callback": d["callback"],
            "members": _shown(d["members"]),
            "shown_all": len(d["members"]) <= MEMBERS_SHOWN,
            "retryable": len(d["retryable"]),
            "chart": charts.progress(d["finished_times"], info.total, d["started"], d["now"]),
            "counts_chart": charts.counts(info.counts),
            "retried": retried,
            "since": datetime.fromtimestamp(d["started"], UTC),
        },
    )


def retry_failed(dash: Dashboard, callback_id: int) -> bulk.BulkReport:
    ids = [j.id for j in members(dash, callback_id) if j.status in bulk.RETRYABLE]
    return dash.queue.act("retry", ids, actor=api.actor())


async def page_retry_failed(request: Request, dash: Dashboard) -> Response:
    callback_id = batch_id(request)
    report = await run_in_threadpool(retry_failed, dash, callback_id)
    target = request.url_for("batch", job_id=callback_id).include_query_params(
        retried=len(report.changed), skipped=report.skipped
    )
    return RedirectResponse(target, status_code=303)


async def api_batch(request: Request, dash: Dashboard) -> Response:
    callback_id = batch_id(request)
    d = await run_in_threadpool(batch_data, dash, callback_id)
    info = d["info"]
    return JSONResponse(
        {
            "id": info.id,
            "callback": {"id": info.id, "type": d["callback"].type, "status": info.status},
            "total": info.total,
            "counts": info.counts,
            "done": info.done,
            "members": [{"id": j.id, "type": j.type, "status": j.status} for j in d["members"]],
        }
    )


async def api_retry_failed(request: Request, dash: Dashboard) -> Response:
    callback_id = batch_id(request)
    report = await run_in_threadpool(retry_failed, dash, callback_id)
    return JSONResponse(
        {
            "id": callback_id,
            "retried": len(report.changed),
            "skipped": report.skipped,
            "refused": {str(k): v for k, v in report.refused.items()},
        }
    )
