"""Limits edited from the dashboard (docs/flow-control.md, docs/dashboard.md): set a key's
running cap and/or rate, or clear what an operator stored so the code's limit applies again;
JSON (``POST /api/admin/limits/{key}``, ``…/clear``) and the queues page's forms.

Every handler here is a mutation: ``app.guarded`` has checked authentication, read-only mode,
the Origin and CSRF before it runs, so a refused request changes nothing. The forms answer
with a redirect (303) to the queues page saying what was done (Post/Redirect/Get).
"""

from __future__ import annotations

import re
from functools import partial
from typing import TYPE_CHECKING, Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response

from ..errors import ConfigurationError
from . import api, params

if TYPE_CHECKING:
    from .common import Dashboard

NUMBER = re.compile(r"\s*[0-9]{1,9}(\.[0-9]{1,6})?\s*")


def _key(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise params.BadParameter("key is required: the limit's key (as in Limit(key, …))")
    if len(value) > 1000:
        raise params.BadParameter("key is longer than 1000 characters")
    return value


def _whole(value: Any, what: str, *, text: bool = True) -> int:
    """A whole number: a JSON number, or a form's digits (``text``)."""
    if text and isinstance(value, str) and re.fullmatch(r"\s*[0-9]{1,9}\s*", value):
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise params.BadParameter(f"{what} must be a whole number, got {value!r:.40}")
    return value


def _seconds(value: Any, *, text: bool = True) -> float:
    if text and isinstance(value, str) and NUMBER.fullmatch(value):
        value = float(value)
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise params.BadParameter(f"rate seconds must be a number, got {value!r:.40}")
    return float(value)


def from_json(body: dict[str, Any]) -> tuple[int | None, tuple[int, float] | None]:
    """``{"running": n}`` and/or ``{"rate": [n, seconds]}`` (anything else is refused)."""
    extra = sorted(set(body) - {"running", "rate"})
    if extra:
        raise params.BadParameter(f"unknown field(s) {', '.join(extra)}: give running, rate")
    running = body.get("running")
    if running is not None:
        running = _whole(running, "running", text=False)
    rate = body.get("rate")
    if rate is not None:
        if not isinstance(rate, list) or len(rate) != 2:
            raise params.BadParameter("rate must be [n, seconds], e.g. [10, 60]")
        rate = (_whole(rate[0], "rate n", text=False), _seconds(rate[1], text=False))
    return running, rate


def from_form(fields: Any) -> tuple[int | None, tuple[int, float] | None]:
    """The queues page's fields: ``running``, ``rate_n`` and ``rate_seconds`` (blank: none)."""
    running_text = (fields.get("running") or "").strip()
    n_text = (fields.get("rate_n") or "").strip()
    seconds_text = (fields.get("rate_seconds") or "").strip()
    running = _whole(running_text, "running") if running_text else None
    if bool(n_text) != bool(seconds_text):
        raise params.BadParameter("a rate needs both: how many starts, and in how many seconds")
    rate = (_whole(n_text, "rate n"), _seconds(seconds_text)) if n_text else None
    return running, rate


def set_limit(
    dash: Dashboard, key: str, running: int | None, rate: tuple[int, float] | None
) -> dict[str, Any]:
    """Store the limit (it wins over the code's until cleared); the limit as now in force."""
    try:
        dash.queue.set_limit(key, running=running, rate=rate, actor=api.actor())
    except ConfigurationError as exc:  # a cap out of range, or none given: bad input here
        raise params.BadParameter(str(exc)) from exc
    info = next((i for i in dash.queue.limits() if i.key == key), None)
    return {"key": key, "result": "set", "limit": None if info is None else info.to_dict()}


def clear_limit(dash: Dashboard, key: str) -> dict[str, Any]:
    cleared = dash.queue.clear_limit(key, actor=api.actor())
    return {"key": key, "result": "cleared" if cleared else "not_set"}


async def api_set(request: Request, dash: Dashboard) -> Response:
    key = _key(request.path_params["key"])
    running, rate = from_json(await api.json_body(request))
    return JSONResponse(await run_in_threadpool(set_limit, dash, key, running, rate))


async def api_clear(request: Request, dash: Dashboard) -> Response:
    key = _key(request.path_params["key"])
    return JSONResponse(await run_in_threadpool(clear_limit, dash, key))


async def page_set(request: Request, dash: Dashboard) -> Response:
    fields = request.state.form
    key = _key(fields.get("key"))
    running, rate = from_form(fields)
    await run_in_threadpool(partial(set_limit, dash, key, running, rate))
    target = request.url_for("queues").include_query_params(limit="set", key=key)
    return RedirectResponse(target, status_code=303)


async def page_clear(request: Request, dash: Dashboard) -> Response:
    key = _key(request.state.form.get("key"))
    out = await run_in_threadpool(clear_limit, dash, key)
    target = request.url_for("queues").include_query_params(limit=out["result"], key=key)
    return RedirectResponse(target, status_code=303)
