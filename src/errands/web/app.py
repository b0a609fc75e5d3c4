"""``create_app``: the dashboard as one ASGI application, and the table of its routes.

Every route is declared in ``ROUTES`` with its access (``public``: reachable without
credentials; ``protected``: everything else) and kind (``read``, ``mutation``, ``login``).
``guarded`` enforces them in one place, so a handler cannot forget: authentication first, then
for a mutation read-only mode (403; a JSON ``dry_run`` that only counts is let through), the
Origin check and CSRF (403) — all before the handler runs, so a refused request changes
nothing. JSON reads refuse query parameters they do not know (400), so a typo such as
``stauts=failed`` is an error, not the whole table. HTML refusals are pages with a way back.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal
from urllib.parse import parse_qsl

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from ..errors import (
    ConfigurationError,
    ErrandsError,
    InvalidTransitionError,
    JobNotFoundError,
    PayloadError,
)
from . import actions, activity, api, batches, boards, limits, openapi, pages
from .common import Dashboard
from .middleware import MAX_BODY, BodyLimit, SecurityHeaders
from .params import BadParameter, unknown_query
from .security import AuthCallable, Guard, current_actor, non_simple, same_origin

if TYPE_CHECKING:
    from ..queue import Queue

HERE = Path(__file__).parent
Access = Literal["public", "protected"]
Kind = Literal["read", "mutation", "login"]
Handler = Callable[[Request, "Dashboard"], Awaitable[Response]]
log = logging.getLogger("errands.web")


@dataclass(frozen=True, slots=True)
class Endpoint:
    path: str
    handler: Handler
    methods: tuple[str, ...]
    name: str
    access: Access
    kind: Kind
    api: bool  # JSON answers and JSON CSRF rules (else HTML pages and form tokens)


def _e(
    path: str, handler: Handler, method: str, name: str, access: Access, kind: Kind, api: bool
) -> Endpoint:
    return Endpoint(path, handler, (method,), name, access, kind, api)


async def openapi_json(request: Request, dash: Dashboard) -> Response:
    """The OpenAPI 3.1 document of the JSON admin API, built from ``ROUTES`` (web/openapi.py)."""
    from .. import __version__  # at call time: the package has finished importing by then

    return JSONResponse(openapi.document(ROUTES, title=dash.title, version=__version__))


MUTATE_API: tuple[Access, Kind, bool] = ("protected", "mutation", True)
READ_API: tuple[Access, Kind, bool] = ("protected", "read", True)
MUTATE_PAGE: tuple[Access, Kind, bool] = ("protected", "mutation", False)

ROUTES: tuple[Endpoint, ...] = (
    _e("/healthz", api.healthz, "GET", "healthz", "public", "read", True),
    _e("/login", pages.login_form, "GET", "login", "public", "read", False),
    _e("/login", pages.login, "POST", "login_post", "public", "login", False),
    _e("/logout", pages.logout, "POST", "logout", "protected", "login", False),
    _e("/metrics", api.metrics, "GET", "metrics", "protected", "read", True),
    # JSON API (docs/dashboard.md, plus bulk, prune, periodic and throughput)
    _e("/api/admin/jobs", api.jobs, "GET", "api_jobs", "protected", "read", True),
    _e("/api/admin/jobs", api.enqueue, "POST", "api_enqueue", *MUTATE_API),
    _e("/api/admin/jobs/{job_id:int}", api.job, "GET", "api_job", "protected", "read", True),
    _e(
        "/api/admin/jobs/{job_id:int}/retry",
        api.retry,
        "POST",
        "api_retry",
        "protected",
        "mutation",
        True,
    ),
    _e(
        "/api/admin/jobs/{job_id:int}/cancel",
        api.cancel,
        "POST",
        "api_cancel",
        "protected",
        "mutation",
        True,
    ),
    _e(
        "/api/admin/jobs/retry",
        api.bulk_retry,
        "POST",
        "api_bulk_retry",
        "protected",
        "mutation",
        True,
    ),
    _e(
        "/api/admin/jobs/cancel",
        api.bulk_cancel,
        "POST",
        "api_bulk_cancel",
        "protected",
        "mutation",
        True,
    ),
    # A signal for ctx.wait_for (docs/durable-steps.md)
    _e("/api/admin/jobs/{job_id:int}/signal", api.signal, "POST", "api_signal", *MUTATE_API),
    # The operator's job edits and schedule switches (issue #25): web/actions.py
    *(
        _e(f"/api/admin/jobs/{{job_id:int}}/{verb}", handler, "POST", f"api_{verb}", *MUTATE_API)
        for verb, handler in (
            ("delete", actions.api_delete),
            ("run_now", actions.api_run_now),
            ("priority", actions.api_priority),
        )
    ),
    *(
        _e(f"/api/admin/jobs/{verb}", handler, "POST", f"api_bulk_{verb}", *MUTATE_API)
        for verb, handler in (
            ("delete", actions.api_bulk_delete),
            ("run_now", actions.api_bulk_run_now),
            ("priority", actions.api_bulk_priority),
        )
    ),
    *(
        _e(
            f"/api/admin/periodic/{{name}}/{verb}",
            handler,
            "POST",
            f"api_periodic_{verb}",
            *MUTATE_API,
        )
        for verb, handler in (
            ("disable", actions.api_periodic_disable),
            ("enable", actions.api_periodic_enable),
            ("run", actions.api_periodic_run),
        )
    ),
    _e("/api/admin/prune", api.prune, "POST", "api_prune", "protected", "mutation", True),
    _e("/api/admin/stats", api.stats, "GET", "api_stats", "protected", "read", True),
    _e("/api/admin/errors", boards.api_errors, "GET", "api_errors", "protected", "read", True),
    _e("/api/admin/workers", api.workers, "GET", "api_workers", "protected", "read", True),
    _e("/api/admin/periodic", api.periodic, "GET", "api_periodic", "protected", "read", True),
    _e("/api/admin/throughput", api.throughput, "GET", "api_throughput", "protected", "read", True),
    _e("/api/admin/charts", boards.api_charts, "GET", "api_charts", "protected", "read", True),
    # Flow control (docs/flow-control.md); the dashboard's HTML for it is the pages' (branch dash)
    _e("/api/admin/queues", api.queues, "GET", "api_queues", "protected", "read", True),
    _e(
        "/api/admin/queues/{name}/pause",
        api.pause_queue,
        "POST",
        "api_pause_queue",
        "protected",
        "mutation",
        True,
    ),
    _e(
        "/api/admin/queues/{name}/resume",
        api.resume_queue,
        "POST",
        "api_resume_queue",
        "protected",
        "mutation",
        True,
    ),
    _e("/api/admin/limits", api.limits, "GET", "api_limits", "protected", "read", True),
    # The operator activity log (web/activity.py): who did what
    _e(
        "/api/admin/activity",
        activity.api_activity,
        "GET",
        "api_activity",
        "protected",
        "read",
        True,
    ),
    # A batch (docs/pipelines.md): its callback's id; web/batches.py
    _e(
        "/api/admin/batches/{job_id:int}",
        batches.api_batch,
        "GET",
        "api_batch",
        "protected",
        "read",
        True,
    ),
    _e(
        "/api/admin/batches/{job_id:int}/retry",
        batches.api_retry_failed,
        "POST",
        "api_batch_retry",
        *MUTATE_API,
    ),
    # Limits edited (issue #36): web/limits.py
    _e("/api/admin/limits/{key}", limits.api_set, "POST", "api_set_limit", *MUTATE_API),
    _e("/api/admin/limits/{key}/clear", limits.api_clear, "POST", "api_clear_limit", *MUTATE_API),
    # The document of the routes above (issue #38): any client can be generated from it
    _e("/api/openapi.json", openapi_json, "GET", "api_openapi", "protected", "read", True),
    # HTML pages
    _e("/", boards.overview, "GET", "overview", "protected", "read", False),
    _e("/jobs", pages.jobs, "GET", "jobs", "protected", "read", False),
    _e("/find", pages.find_job, "GET", "find", "protected", "read", False),
    _e("/jobs/{job_id:int}", pages.job, "GET", "job", "protected", "read", False),
    _e("/jobs/{job_id:int}/payload", pages.payload, "GET", "payload", "protected", "read", False),
    _e("/jobs/{job_id:int}/result", pages.result, "GET", "result", "protected", "read", False),
    _e(
        "/jobs/{job_id:int}/attempts/{attempt:int}/traceback",
        pages.traceback,
        "GET",
        "traceback",
        "protected",
        "read",
        False,
    ),
    _e("/jobs/{job_id:int}/retry", pages.retry, "POST", "retry", "protected", "mutation", False),
    _e("/jobs/{job_id:int}/cancel", pages.cancel, "POST", "cancel", "protected", "mutation", False),
    *(
        _e(f"/jobs/{{job_id:int}}/{verb}", handler, "POST", verb, *MUTATE_PAGE)
        for verb, handler in (
            ("delete", actions.page_delete),
            ("run_now", actions.page_run_now),
            ("priority", actions.page_priority),
        )
    ),
    _e("/jobs/{job_id:int}/signal", pages.send_signal, "POST", "signal", *MUTATE_PAGE),
    _e("/jobs/act", pages.act_on_selected, "POST", "act", "protected", "mutation", False),
    _e("/bulk/confirm", pages.bulk_confirm, "GET", "bulk", "protected", "read", False),
    _e("/bulk", pages.bulk_run, "POST", "bulk_post", "protected", "mutation", False),
    _e("/batches/{job_id:int}", batches.page, "GET", "batch", "protected", "read", False),
    _e(
        "/batches/{job_id:int}/retry",
        batches.page_retry_failed,
        "POST",
        "batch_retry",
        *MUTATE_PAGE,
    ),
    _e("/failures", boards.failures, "GET", "failures", "protected", "read", False),
    _e("/queues", boards.queues, "GET", "queues", "protected", "read", False),
    _e("/queues/pause", boards.pause_queue, "POST", "queue_pause", "protected", "mutation", False),
    _e(
        "/queues/resume",
        boards.resume_queue,
        "POST",
        "queue_resume",
        "protected",
        "mutation",
        False,
    ),
    _e("/queues/limit", limits.page_set, "POST", "limit_set", *MUTATE_PAGE),
    _e("/queues/limit/clear", limits.page_clear, "POST", "limit_clear", *MUTATE_PAGE),
    _e("/periodic", boards.periodic, "GET", "periodic", "protected", "read", False),
    *(
        _e(f"/periodic/{verb}", handler, "POST", f"periodic_{verb}", *MUTATE_PAGE)
        for verb, handler in (
            ("run", actions.page_periodic_run),
            ("disable", actions.page_periodic_disable),
            ("enable", actions.page_periodic_enable),
        )
    ),
    _e("/workers", boards.workers, "GET", "workers", "protected", "read", False),
    _e("/activity", activity.page, "GET", "activity", "protected", "read", False),
    _e("/prune/confirm", pages.prune_confirm, "GET", "prune", "protected", "read", False),
    _e("/prune", pages.prune_run, "POST", "prune_post", "protected", "mutation", False),
)
# Mounted sub-apps, classified like routes: the static files hold no data (CSS and the script).
PUBLIC_MOUNTS = ("/static",)
# JSON mutations whose body may ask only to count (``"dry_run": true``): allowed read-only.
DRY_RUN_OK = frozenset(
    {
        "api_bulk_retry",
        "api_bulk_cancel",
        "api_bulk_delete",
        "api_bulk_run_now",
        "api_bulk_priority",
        "api_prune",
    }
)
OPEN_WARNING = (
    "this dashboard has no token and no auth: anyone who can reach it can read every job{acts}. "
    "Pass token= or auth= to create_app (or allowed_hosts= to answer loopback names only)"
)


async def form_fields(request: Request) -> dict[str, str]:
    """An urlencoded form body (the only kind the dashboard's forms send). Parsed here rather
    than with Starlette's parser, which needs python-multipart for this too."""
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype != "application/x-www-form-urlencoded":
        return {}
    raw = await request.body()
    return dict(parse_qsl(raw.decode("utf-8", errors="replace"), keep_blank_values=True))


def _refuse(ep: Endpoint, status: int, message: str, request: Request, dash: Dashboard) -> Response:
    if ep.api:
        return JSONResponse({"error": message}, status_code=status)
    return pages.error_page(request, dash, status, message)


async def _dry_run_only(request: Request) -> bool:
    """Whether a JSON mutation's body asks only to count (read-only mode lets it through;
    the handler reads the same cached body, so it cannot act)."""
    try:
        return (await api.json_body(request)).get("dry_run") is True
    except BadParameter:
        return False


def guarded(ep: Endpoint, dash: Dashboard) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        tries_token = "authorization" in request.headers or ep.name == "login_post"
        wait = dash.guard.wait_seconds(request) if tries_token and dash.guard.token else 0.0
        if wait:
            response = _refuse(
                ep,
                429,
                f"too many wrong tokens from this address; try again in {int(wait) + 1} s",
                request,
                dash,
            )
            response.headers["retry-after"] = str(int(wait) + 1)
            return response
        if ep.access == "protected" and not await dash.guard.authenticated(request):
            if not ep.api and request.method == "GET" and dash.guard.uses_login:
                return RedirectResponse(pages.login_url(request), status_code=303)
            response = _refuse(
                ep,
                401,
                "authentication required: log in, or send 'Authorization: Bearer <token>'",
                request,
                dash,
            )
            if ep.api and dash.guard.uses_login:
                response.headers["www-authenticate"] = "Bearer"
            return response
        if ep.api and request.method == "GET":
            extra = unknown_query(ep.name, request.query_params.keys())
            if extra:
                return _refuse(ep, 400, extra, request, dash)
        if ep.kind in ("mutation", "login"):
            if not same_origin(request):
                return _refuse(
                    ep,
                    403,
                    "cross-origin request refused (Origin does not match)",
                    request,
                    dash,
                )
            if ep.api:
                if not non_simple(request):
                    return _refuse(
                        ep,
                        403,
                        "send Content-Type: application/json or an X-Requested-With header "
                        "(CSRF protection); nothing was changed",
                        request,
                        dash,
                    )
            else:
                request.state.form = await form_fields(request)
                if ep.kind == "mutation" and not dash.guard.csrf_ok(
                    request, request.state.form.get("csrf")
                ):
                    return _refuse(
                        ep,
                        403,
                        "the form's CSRF token is missing or stale; reload the page "
                        "and try again (nothing was changed)",
                        request,
                        dash,
                    )
            # After the CSRF checks, so a cross-site request learns nothing even read-only.
            if ep.kind == "mutation" and dash.read_only:
                if not (ep.name in DRY_RUN_OK and await _dry_run_only(request)):
                    return _refuse(
                        ep, 403, "this dashboard is read-only; nothing was changed", request, dash
                    )
        # Who acts (web/security.py, "Identity"): what the handler's Queue calls are logged as.
        current_actor.set(dash.guard.actor(request))
        try:
            return await ep.handler(request, dash)
        except (BadParameter, PayloadError) as exc:  # PayloadError: a filter no row can hold
            return _refuse(ep, 400, str(exc), request, dash)
        except JobNotFoundError as exc:
            return _refuse(ep, 404, str(exc), request, dash)
        except (InvalidTransitionError, ConfigurationError) as exc:
            return _refuse(ep, 409, str(exc), request, dash)
        except ErrandsError as exc:  # database trouble: one line, no traceback to the client
            log.warning("%s %s: %s", request.method, request.url.path, exc)
            return _refuse(ep, 503, str(exc), request, dash)

    return endpoint


def build_routes(dash: Dashboard) -> list[BaseRoute]:
    routes: list[BaseRoute] = [
        Route(ep.path, guarded(ep, dash), methods=list(ep.methods), name=ep.name) for ep in ROUTES
    ]
    routes.append(Mount("/static", StaticFiles(directory=HERE / "static"), name="static"))
    return routes


def create_app(
    queue: Queue,
    *,
    token: str | Mapping[str, str] | None = None,
    read_only: bool = False,
    auth: AuthCallable | None = None,
    secret_key: str | None = None,
    allowed_hosts: Sequence[str] | None = None,
    title: str = "errands",
) -> Starlette:
    """The dashboard and JSON admin API for ``queue`` as an ASGI app (mount it, or serve it
    with ``errands dashboard``). See docs/dashboard.md.

    - ``token``: every route but ``/healthz``, ``/login`` and ``/static`` needs it (login form
      → session cookie, or ``Authorization: Bearer``). Several, labelled: ``{"alice": "…",
      "deploy-bot": "…"}``; the label of the token used is the actor of what it does (the
      activity log, job events), else ``api``.
    - ``auth``: instead of a token, the host application's own check, ``auth(request) ->
      bool | str`` (may be ``async``); False answers 401, a string lets the request through
      and names the user acting.
    - ``read_only``: every mutation answers 403 and writes nothing.
    - ``secret_key``: signs sessions when there is no token (default: random per process).
    - ``allowed_hosts``: Host header names accepted (DNS-rebinding protection); None: any.
    """
    guard = Guard(token=token, auth=auth, secret_key=secret_key)
    warning = None
    if token is None and auth is None and not allowed_hosts:
        warning = OPEN_WARNING.format(
            acts="" if read_only else " and retry, cancel, delete or prune them"
        )
        log.warning("errands dashboard: %s", warning)
    dash = Dashboard(queue, guard, read_only=read_only, title=title, open_warning=warning)
    middleware = [Middleware(SecurityHeaders), Middleware(BodyLimit, limit=MAX_BODY)]
    if allowed_hosts:
        middleware.append(Middleware(TrustedHostMiddleware, allowed_hosts=list(allowed_hosts)))

    async def not_found(request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 404
        detail = exc.detail if isinstance(exc, HTTPException) else "Not Found"
        if request.url.path.startswith(("/api/", "/metrics", "/healthz")):
            headers = exc.headers if isinstance(exc, HTTPException) else None
            body = {"error": f"{detail}: {request.url.path}"}
            return JSONResponse(body, status_code=status, headers=headers)
        response = pages.error_page(request, dash, status, f"{detail}: no page at this address")
        if isinstance(exc, HTTPException) and exc.headers:
            response.headers.update(exc.headers)
        return response

    app = Starlette(
        routes=build_routes(dash),
        middleware=middleware,
        exception_handlers={404: not_found, 405: not_found},
    )
    app.state.dashboard = dash
    return app
