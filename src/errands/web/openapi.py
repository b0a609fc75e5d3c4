"""``GET /api/openapi.json``: an OpenAPI 3.1 document of the JSON admin API, built from the
route table itself (``app.ROUTES``: paths, methods, access, kind), the query parameters the
guard lets through (``params.API_QUERY``) and one ``Doc`` per route here (what it does, its
body, its answer). A route without a ``Doc``, or a ``Doc`` without a route, fails
tests/web/test_openapi.py, so the document cannot drift from the router. docs/dashboard.md
lists the same routes for people.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..core.options import NAMES as OPTION_NAMES
from ..core.states import State
from .params import API_QUERY, MAX_LIMIT, WINDOWS
from .security import SESSION_COOKIE

PREFIX = "/api/admin/"
JSON = "application/json"


class Route(Protocol):
    """What the document reads of a route (``app.Endpoint``)."""

    @property
    def path(self) -> str: ...
    @property
    def methods(self) -> tuple[str, ...]: ...
    @property
    def name(self) -> str: ...
    @property
    def access(self) -> str: ...
    @property
    def kind(self) -> str: ...


def _obj(*required: str, **properties: Any) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = list(required)
    return schema


ANY_OBJECT: dict[str, Any] = {"type": "object"}
TEXT: dict[str, Any] = {"type": "string"}
INT: dict[str, Any] = {"type": "integer"}
FLAG: dict[str, Any] = {"type": "boolean"}
ID: dict[str, Any] = {"type": "integer", "minimum": 1, "maximum": 2**63 - 1}
JOB: dict[str, Any] = {"$ref": "#/components/schemas/Job"}
STATES = [s.value for s in State]
FILTERS: dict[str, Any] = {
    "status": {"type": "string", "enum": STATES},
    "type": TEXT,
    "queue": TEXT,
    "error_code": TEXT,
    "dry_run": {**FLAG, "description": "only count (allowed on a read-only dashboard)"},
}
BULK_ANSWER = _obj(
    "selected",
    "changed",
    "skipped",
    "dry_run",
    selected=INT,
    changed=INT,
    requested=INT,
    skipped=INT,
    dry_run=FLAG,
    refused={"type": "object", "additionalProperties": TEXT},
)
EDIT_BODY: dict[str, Any] = {
    **_obj(ids={"type": "array", "items": ID, "maxItems": 10_000}, **FILTERS),
    "description": "a list of ids, or filters (status required); not both",
}
ONE_ANSWER = _obj("id", "result", id=ID, result=TEXT, status=TEXT, priority=INT)
SWITCH_ANSWER = _obj("name", "result", name=TEXT, result=TEXT, id=ID)
QUEUE_ANSWER = _obj("queue", "result", queue=TEXT, result=TEXT)


@dataclass(frozen=True, slots=True)
class Doc:
    """A JSON route's part of the document the route table does not say."""

    summary: str
    answer: dict[str, Any] = field(default_factory=lambda: ANY_OBJECT)
    body: dict[str, Any] | None = None
    errors: tuple[int, ...] = ()  # beyond what its access and kind imply
    status: int = 200  # its success answer's status


# POST /api/admin/jobs: the body's options are errands.EnqueueOptions' fields, read from its
# one definition (core/options.py) so the document cannot miss a new option.
_OPTION_SCHEMAS: dict[str, dict[str, Any]] = {
    "queue": TEXT,
    "priority": {"type": "integer", "minimum": -(2**31), "maximum": 2**31 - 1},
    "run_at": {
        "oneOf": [{"type": "number"}, {"type": "string", "format": "date-time"}],
        "description": "unix seconds, or ISO 8601 with its UTC offset",
    },
    "delay": {"type": "number", "minimum": 0, "description": "seconds from now"},
    "max_attempts": {"type": "integer", "minimum": 1},
    "unique_key": TEXT,
    "after": {"type": "array", "items": ID},
    "on_upstream_failure": {"type": "string", "enum": ["cancel", "run"]},
}
ENQUEUE_BODY = _obj(
    "type",
    type={**TEXT, "description": "the task name"},
    payload={**ANY_OBJECT, "description": "the handler's keyword arguments"},
    **{name: _OPTION_SCHEMAS.get(name, ANY_OBJECT) for name in OPTION_NAMES},
)

DOCS: Mapping[str, Doc] = {
    "api_enqueue": Doc(
        "Enqueue one job (q.enqueue: the body's other keys are the enqueue options)",
        _obj("id", "result", id=ID, result=TEXT),
        ENQUEUE_BODY,
        status=201,
    ),
    "api_jobs": Doc(
        "List jobs, newest first (the /jobs page's filters)",
        _obj(
            "jobs",
            jobs={"type": "array", "items": JOB},
            next_cursor={"type": ["string", "null"]},
            scanned=INT,
            scan_limit=INT,
        ),
    ),
    "api_job": Doc(
        "One job with its attempts, events and dependencies",
        _obj("job", job=JOB, attempts={"type": "array"}, events={"type": "array"}, deps=ANY_OBJECT),
        errors=(404,),
    ),
    "api_signal": Doc(
        "Send a signal to a job (a durable wait_for takes it: docs/durable-steps.md)",
        _obj("id", "signal", "status", id=ID, signal=TEXT, status={"type": ["string", "null"]}),
        _obj("name", name=TEXT, payload={"description": "any JSON value (the payload rule)"}),
        errors=(404, 409),
    ),
    "api_retry": Doc(
        "Retry a failed or cancelled job (reset_steps: forget its recorded durable steps "
        "first, so it starts over)",
        ONE_ANSWER,
        {"type": "object", "properties": {"reset_steps": {"type": "boolean"}}},
        errors=(404, 409),
    ),
    "api_cancel": Doc(
        "Cancel a queued job, or ask a running one to stop", ONE_ANSWER, errors=(404, 409)
    ),
    "api_bulk_retry": Doc(
        "Retry the failed or cancelled jobs matching filters",
        BULK_ANSWER,
        _obj("status", **FILTERS),
    ),
    "api_bulk_cancel": Doc(
        "Cancel the queued or running jobs matching filters", BULK_ANSWER, _obj("status", **FILTERS)
    ),
    "api_delete": Doc("Delete a job with its attempts and events", ONE_ANSWER, errors=(404, 409)),
    "api_run_now": Doc("Make a scheduled queued job due now", ONE_ANSWER, errors=(404, 409)),
    "api_priority": Doc(
        "Change a queued or waiting job's priority",
        ONE_ANSWER,
        _obj("priority", priority={"type": "integer", "minimum": -(2**31), "maximum": 2**31 - 1}),
        errors=(404, 409),
    ),
    "api_bulk_delete": Doc("Delete many jobs (ids or filters)", BULK_ANSWER, EDIT_BODY),
    "api_bulk_run_now": Doc(
        "Make many queued jobs due now (ids or filters)", BULK_ANSWER, EDIT_BODY
    ),
    "api_bulk_priority": Doc(
        "Change many jobs' priority (ids or filters)",
        BULK_ANSWER,
        {
            **EDIT_BODY,
            "properties": {**EDIT_BODY["properties"], "priority": INT},
            "required": ["priority"],
        },
    ),
    "api_periodic_disable": Doc("Disable a schedule", SWITCH_ANSWER, errors=(404,)),
    "api_periodic_enable": Doc("Enable a schedule", SWITCH_ANSWER, errors=(404,)),
    "api_periodic_run": Doc("Enqueue a schedule's job now", SWITCH_ANSWER, errors=(404,)),
    "api_prune": Doc(
        "Apply retention now",
        _obj(
            "dry_run",
            dry_run=FLAG,
            deleted={"type": "object", "additionalProperties": INT},
            total=INT,
            batches=INT,
        ),
        _obj(dry_run=FILTERS["dry_run"]),
    ),
    "api_stats": Doc("Counts, rates and latencies (errands stats --json)"),
    "api_errors": Doc("Failures grouped by error code and type (the /failures page)"),
    "api_workers": Doc("Live workers", _obj("workers", workers={"type": "array"})),
    "api_periodic": Doc(
        "Schedules (errands periodic --json)", _obj("periodic", periodic={"type": "array"})
    ),
    "api_throughput": Doc("Finished jobs per hour", _obj("hours", hours={"type": "array"})),
    "api_charts": Doc("The overview's charts, per hour", _obj("hours", hours={"type": "array"})),
    "api_queues": Doc("Queues and their pause state", _obj("queues", queues={"type": "array"})),
    "api_pause_queue": Doc(
        "Pause a queue's claims ('*': every queue)", QUEUE_ANSWER, _obj(reason=TEXT)
    ),
    "api_resume_queue": Doc("Resume a paused queue", QUEUE_ANSWER),
    "api_limits": Doc("The limits in force", _obj("limits", limits={"type": "array"})),
    "api_activity": Doc(
        "The operator activity log, newest first: who did what, when, to how many",
        _obj(
            "activity",
            activity={"type": "array", "items": ANY_OBJECT},
            next_cursor={"type": ["string", "null"]},
        ),
    ),
    "api_batch": Doc(
        "A batch (its callback job's id): members per state, the callback's state, the members",
        _obj(
            "id",
            "callback",
            "total",
            "counts",
            "done",
            "members",
            id=ID,
            callback={"type": "object"},
            total=INT,
            counts={"type": "object", "additionalProperties": INT},
            done=FLAG,
            members={"type": "array"},
        ),
        errors=(404,),
    ),
    "api_batch_retry": Doc(
        "Retry a batch's failed and cancelled members",
        _obj(
            "id",
            "retried",
            "skipped",
            id=ID,
            retried=INT,
            skipped=INT,
            refused={"type": "object"},
        ),
        errors=(404,),
    ),
    "api_set_limit": Doc(
        "Store a key's running cap and/or rate; it wins over the code's until cleared",
        _obj("key", "result", "limit", key=TEXT, result=TEXT, limit={"type": ["object", "null"]}),
        _obj(
            running={"type": "integer", "minimum": 0},
            rate={
                "type": "array",
                "items": {"type": "number"},
                "minItems": 2,
                "maxItems": 2,
                "description": "[n, seconds]: at most n starts in any window of seconds",
            },
        ),
    ),
    "api_clear_limit": Doc(
        "Drop a key's stored limit: the code's applies again ('not_set' if none was stored)",
        _obj("key", "result", key=TEXT, result=TEXT),
    ),
}

# Query parameters whose values are not free text (the rest are strings).
QUERY_SCHEMAS: Mapping[str, dict[str, Any]] = {
    "status": {"type": "string", "enum": STATES},
    "view": {"type": "string", "enum": ["scheduled", "retrying", "snoozed", "running", "dead"]},
    "limit": {"type": "integer", "minimum": 1, "description": f"capped at {MAX_LIMIT}"},
    "top": {"type": "integer", "minimum": 1},
    "page": {"type": "integer", "minimum": 1},
    "hours": {"type": "integer", "minimum": 1},
    "window": {"type": "string", "examples": sorted(WINDOWS)},
}

ERRORS: Mapping[int, str] = {
    400: "a bad parameter or body, or a query parameter the route does not take",
    401: "no token, or a wrong one",
    403: "refused: a read-only dashboard, or the CSRF or Origin check",
    404: "no such job or schedule",
    409: "the job's state does not allow it",
    413: "a body over 64 KiB",
    429: "too many wrong tokens from this address (see Retry-After)",
    503: "the database did not answer",
}
_PARAM = re.compile(r"\{(\w+)(?::(\w+))?\}")


def _path(path: str) -> tuple[str, list[dict[str, Any]]]:
    """Starlette's ``/jobs/{job_id:int}`` as OpenAPI's ``/jobs/{job_id}`` and its parameters."""
    found = [
        {"name": name, "in": "path", "required": True, "schema": ID if conv == "int" else TEXT}
        for name, conv in _PARAM.findall(path)
    ]
    return _PARAM.sub(r"{\1}", path), found


def _operation(route: Route, doc: Doc) -> dict[str, Any]:
    _, parameters = _path(route.path)
    mutation = route.kind == "mutation"
    for name in sorted(API_QUERY.get(route.name, ())):
        schema = QUERY_SCHEMAS.get(name, TEXT)
        parameters.append({"name": name, "in": "query", "required": False, "schema": schema})
    if mutation:
        parameters.append(
            {
                "name": "X-Requested-With",
                "in": "header",
                "required": False,
                "schema": TEXT,
                "description": "CSRF: send it, or Content-Type: application/json",
            }
        )
    statuses = {400, 429, 503, *doc.errors}
    if route.access == "protected":
        statuses.add(401)
    if mutation:
        statuses |= {403, 413}
    responses: dict[str, Any] = {
        str(doc.status): {"description": "OK", "content": {JSON: {"schema": doc.answer}}}
    }
    for status in sorted(statuses):
        responses[str(status)] = {"$ref": f"#/components/responses/E{status}"}
    op: dict[str, Any] = {
        "operationId": route.name,
        "summary": doc.summary,
        "parameters": parameters,
        "responses": responses,
    }
    if doc.body is not None:
        op["requestBody"] = {"required": False, "content": {JSON: {"schema": doc.body}}}
    if route.access == "public":
        op["security"] = []
    return op


def document(routes: Iterable[Route], *, title: str, version: str) -> dict[str, Any]:
    """The OpenAPI 3.1 document of every ``/api/admin/`` route in ``routes``. A route with no
    ``Doc`` raises KeyError: the tests build it, so a new route cannot go undocumented."""
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        if not route.path.startswith(PREFIX):
            continue
        path, _ = _path(route.path)
        for method in route.methods:
            paths.setdefault(path, {})[method.lower()] = _operation(route, DOCS[route.name])
    return {
        "openapi": "3.1.0",
        "info": {
            "title": f"{title} admin API",
            "version": version,
            "description": "The dashboard's JSON API (docs/dashboard.md). Mutations also need "
            "a same-origin Origin header when one is sent.",
        },
        "paths": paths,
        "security": [{"bearer": []}, {"session": []}],
        "components": {
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer", "description": "the token"},
                "session": {"type": "apiKey", "in": "cookie", "name": SESSION_COOKIE},
            },
            "schemas": {
                "Job": {**ANY_OBJECT, "description": "every jobs column as a key"},
                "Error": _obj("error", error=TEXT),
            },
            "responses": {
                f"E{status}": {
                    "description": text,
                    "content": {JSON: {"schema": {"$ref": "#/components/schemas/Error"}}},
                }
                for status, text in ERRORS.items()
            },
        },
    }
