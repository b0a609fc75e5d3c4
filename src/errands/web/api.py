"""The JSON admin API (docs/dashboard.md): ``/api/admin/…``, ``/metrics`` and ``/healthz``.

Handlers read parameters (``params``: 400 on a bad one), then run every database call in a
worker thread (``run_in_threadpool``), never on the event loop. Mutations arrive here only
after ``app.guarded`` has checked authentication, read-only mode and CSRF.
"""

from __future__ import annotations

import json
import logging
from functools import partial
from typing import TYPE_CHECKING, Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..client import bulk
from ..core.options import EnqueueOptions
from ..errors import ConfigurationError, JobNotFoundError, PayloadError, UnknownTaskError
from . import params, search
from .security import current_actor

if TYPE_CHECKING:
    from .common import Dashboard

log = logging.getLogger("errands.web")


def actor() -> str:
    """Who the request being handled acts as (web/security.py, "Identity"): the actor of the
    Queue calls its handler makes, so the activity log and the job events name them."""
    return current_actor.get()


def not_found(job_id: object) -> JobNotFoundError:
    return JobNotFoundError(f"no job with id {job_id}; list jobs with GET /api/admin/jobs")


async def json_body(request: Request) -> dict[str, Any]:
    """The request's JSON object (an empty body is ``{}``)."""
    raw = await request.body()
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise params.BadParameter("the request body is not valid JSON") from None
    if not isinstance(value, dict):
        raise params.BadParameter("the request body must be a JSON object")
    return value


def list_jobs(dash: Dashboard, query: Any) -> search.Found:
    """A page of jobs for the filters in ``query`` (web/search.py: the page takes the same)."""
    return search.find(dash, search.filters(query))


async def jobs(request: Request, dash: Dashboard) -> Response:
    found = await run_in_threadpool(list_jobs, dash, request.query_params)
    body: dict[str, Any] = {
        "jobs": [j.to_dict() for j in found.jobs],
        "next_cursor": None if found.next_cursor is None else str(found.next_cursor),
    }
    if found.scanned is not None:  # a bounded search: how far it looked
        body["scanned"] = found.scanned
        body["scan_limit"] = found.scan_limit
    return JSONResponse(body)


def job_detail(dash: Dashboard, job_id: int) -> dict[str, Any]:
    q = dash.queue
    job = q.get(job_id)
    if job is None:
        raise not_found(job_id)
    attempts = q.attempts(job_id)
    return {
        "job": job,
        "attempts": attempts,
        "events": q.events(job_id),
        # The jobs around it (docs/pipelines.md): {upstream: [...], downstream: [...]}.
        "deps": q.graph(job_id),
        "steps": q.steps(job_id),  # its durable steps (docs/durable-steps.md)
    }


async def job(request: Request, dash: Dashboard) -> Response:
    job_id = params.job_id(request.path_params["job_id"])
    if job_id is None:
        raise not_found(request.path_params["job_id"])
    d = await run_in_threadpool(job_detail, dash, job_id)
    return JSONResponse(
        {
            "job": d["job"].to_dict(),
            "attempts": [
                {**a.to_dict(), "has_traceback": a.traceback_ref is not None} for a in d["attempts"]
            ],
            "events": [e.to_dict() for e in d["events"]],
            "deps": d["deps"],
            "steps": [s.to_dict() for s in d["steps"]],
        }
    )


async def enqueue(request: Request, dash: Dashboard) -> Response:
    """``POST /api/admin/jobs``: ``{"type": …, "payload": {…}, …}`` with any enqueue option
    (errands.EnqueueOptions' names; ``run_at`` as unix seconds or ISO 8601 with offset)."""
    body = await json_body(request)
    job_type = body.pop("type", None)
    if not isinstance(job_type, str):
        raise params.BadParameter('"type" is required: the task name, a string')
    payload = body.pop("payload", None)
    try:  # bad input (options, an unknown type): 400, as a bad parameter
        options = EnqueueOptions.of_json(body, "POST /api/admin/jobs")
        # A job enqueued by hand through the admin API is an operator action, logged with
        # the job (an application's own enqueues are not: they are its work, each with its
        # ENQUEUED event).
        enqueue = partial(dash.queue.enqueue, options=options, actor=actor(), by_hand=True)
        job_id = await run_in_threadpool(enqueue, job_type, payload)
    except (ConfigurationError, UnknownTaskError) as exc:
        raise params.BadParameter(str(exc)) from None
    return JSONResponse({"id": job_id, "result": "enqueued"}, status_code=201)


async def signal(request: Request, dash: Dashboard) -> Response:
    """Send a signal to a job (docs/durable-steps.md): body ``{"name": …, "payload": …}``."""
    job_id = params.job_id(request.path_params["job_id"])
    if job_id is None:
        raise not_found(request.path_params["job_id"])
    body = await json_body(request)
    name = body.get("name")
    if not isinstance(name, str):
        raise params.BadParameter('the body must name the signal: {"name": "…", "payload": …}')
    send = partial(dash.queue.signal, actor=actor(), by_hand=True)  # logged with the signal
    try:
        await run_in_threadpool(send, job_id, name, body.get("payload"))
    except (ValueError, PayloadError) as exc:  # a name or payload errands cannot store
        raise params.BadParameter(str(exc)) from None
    job = await run_in_threadpool(dash.queue.get, job_id)
    status = None if job is None else job.status
    return JSONResponse({"id": job_id, "signal": name, "status": status})


async def retry(request: Request, dash: Dashboard) -> Response:
    """Retry a failed or cancelled job; body (optional) ``{"reset_steps": true}`` forgets
    its recorded durable steps first, so it starts over (docs/durable-steps.md)."""
    job_id = params.job_id(request.path_params["job_id"])
    if job_id is None:
        raise not_found(request.path_params["job_id"])
    reset = (await json_body(request)).get("reset_steps", False)
    if not isinstance(reset, bool):
        raise params.BadParameter('"reset_steps" must be true or false')
    await run_in_threadpool(partial(dash.queue.retry, job_id, actor=actor(), reset_steps=reset))
    return JSONResponse({"id": job_id, "result": "retried", "status": "queued"})


async def cancel(request: Request, dash: Dashboard) -> Response:
    job_id = params.job_id(request.path_params["job_id"])
    if job_id is None:
        raise not_found(request.path_params["job_id"])
    what = await run_in_threadpool(dash.queue.cancel, job_id, actor=actor())
    return JSONResponse({"id": job_id, "result": what})


def bulk_filters(query: Any, allowed: frozenset[str]) -> dict[str, Any]:
    status = params.status(query, tuple(sorted(allowed)))
    if status is None:
        raise params.BadParameter(f"status is required: one of {', '.join(sorted(allowed))}")
    return {
        "status": status,
        "type": params.text(query, "type"),
        "queue": params.text(query, "queue"),
        "error_code": params.text(query, "error_code"),
    }


def run_bulk(
    dash: Dashboard,
    action: str,
    filters: dict[str, Any],
    dry_run: bool,
    priority: int | None = None,
) -> dict[str, Any]:
    q = dash.queue
    ids = q.select_jobs(action, filters["status"], **_rest(filters))
    if dry_run:
        return {"selected": len(ids), "changed": 0, "requested": 0, "skipped": 0, "dry_run": True}
    report = q.act(action, ids, actor=actor(), priority=priority, selected_by=filters)
    log.info(
        "bulk %s by %s: %d selected, %d changed", action, actor(), len(ids), len(report.changed)
    )
    return {
        "selected": report.selected,
        "changed": len(report.changed),
        "requested": len(report.requested),
        "skipped": report.skipped,
        "dry_run": False,
    }


def _rest(filters: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in filters.items() if k != "status"}


async def _bulk(request: Request, dash: Dashboard, action: str) -> Response:
    body = await json_body(request)
    filters = bulk_filters(body, bulk.SELECTABLE[action])
    out = await run_in_threadpool(run_bulk, dash, action, filters, params.flag(body, "dry_run"))
    return JSONResponse(out)


async def bulk_retry(request: Request, dash: Dashboard) -> Response:
    return await _bulk(request, dash, "retry")


async def bulk_cancel(request: Request, dash: Dashboard) -> Response:
    return await _bulk(request, dash, "cancel")


def run_prune(dash: Dashboard, dry_run: bool) -> dict[str, Any]:
    report = dash.queue.prune(dry_run=dry_run, actor=actor())
    if not dry_run:
        # The pruned jobs' own event rows go with them (ON DELETE CASCADE), so the action is
        # recorded in the log instead.
        log.info("prune by api: %d job(s) deleted %s", report.total, report.deleted)
    return {
        "dry_run": report.dry_run,
        "deleted": report.deleted,
        "total": report.total,
        "batches": report.batches,
    }


async def prune(request: Request, dash: Dashboard) -> Response:
    body = await json_body(request)
    out = await run_in_threadpool(run_prune, dash, params.flag(body, "dry_run"))
    return JSONResponse(out)


async def stats(request: Request, dash: Dashboard) -> Response:
    window = params.window(request.query_params)
    top = params.integer(request.query_params, "top", default=10, low=1, high=100)
    out = await run_in_threadpool(dash.queue.stats, window=window, top=top or 10)
    return JSONResponse(out)


async def workers(request: Request, dash: Dashboard) -> Response:
    rows = await run_in_threadpool(dash.queue.workers)
    return JSONResponse({"workers": rows})


def periodic_rows(dash: Dashboard) -> list[dict[str, Any]]:
    return dash.queue.periodic_report()


async def periodic(request: Request, dash: Dashboard) -> Response:
    rows = await run_in_threadpool(periodic_rows, dash)
    return JSONResponse({"periodic": rows})


async def throughput(request: Request, dash: Dashboard) -> Response:
    hours = params.integer(request.query_params, "hours", default=24, low=1, high=24 * 31)
    rows = await run_in_threadpool(dash.queue.throughput, hours=hours or 24)
    return JSONResponse({"hours": rows})


# -- flow control (docs/flow-control.md) -----------------------------------------------------------


async def queues(request: Request, dash: Dashboard) -> Response:
    infos = await run_in_threadpool(dash.queue.queues)
    return JSONResponse({"queues": [i.to_dict() for i in infos]})


async def pause_queue(request: Request, dash: Dashboard) -> Response:
    name = request.path_params["name"]
    body = await json_body(request)
    reason = body.get("reason")
    if reason is not None and not isinstance(reason, str):
        raise params.BadParameter("reason must be a string")
    await run_in_threadpool(partial(dash.queue.pause, name, reason=reason, actor=actor()))
    return JSONResponse({"queue": name, "result": "paused"})


async def resume_queue(request: Request, dash: Dashboard) -> Response:
    name = request.path_params["name"]
    resumed = await run_in_threadpool(partial(dash.queue.resume, name, actor=actor()))
    return JSONResponse({"queue": name, "result": "resumed" if resumed else "not_paused"})


async def limits(request: Request, dash: Dashboard) -> Response:
    infos = await run_in_threadpool(dash.queue.limits)
    return JSONResponse({"limits": [i.to_dict() for i in infos]})


async def metrics(request: Request, dash: Dashboard) -> Response:
    from ..metrics import CONTENT_TYPE, render_metrics

    data = await run_in_threadpool(render_metrics, dash.queue)
    return Response(data, media_type=None, headers={"content-type": CONTENT_TYPE})


def _probe(dash: Dashboard) -> None:
    dash.queue.get(1)  # one primary-key read: the database answers


async def healthz(request: Request, dash: Dashboard) -> Response:
    try:
        await run_in_threadpool(_probe, dash)
    except Exception:  # public route: say only that the database did not answer
        log.exception("healthz: the database did not answer")
        return JSONResponse({"status": "error", "database": "unreachable"}, status_code=503)
    return JSONResponse({"status": "ok"})
