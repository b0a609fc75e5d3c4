"""``GET /api/openapi.json`` (web/openapi.py): a valid OpenAPI 3.1 document, checked by
openapi-spec-validator, that names every ``/api/admin/`` route the app serves — read from the
Starlette app's own routes, not from the table the document is built from — and whose every
operation answers (no router 404 or 405)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from openapi_spec_validator import validate
from starlette.routing import Route
from starlette.testclient import TestClient

import errands
from errands.web import create_app
from errands.web.openapi import DOCS
from helpers.web import populate

TOKEN = "s3cret-token"
AUTH = {"authorization": f"Bearer {TOKEN}", "content-type": "application/json"}


@pytest.fixture
def served(queue: errands.Queue) -> Iterator[tuple[TestClient, dict[str, Any]]]:
    @queue.periodic(every=3600)
    def nightly() -> None:
        return None

    ids = populate(queue)  # its burst worker records the schedule too
    with TestClient(create_app(queue, token=TOKEN)) as client:
        yield client, ids


def test_the_document_is_valid_openapi_3_1(served: tuple[TestClient, dict[str, Any]]) -> None:
    client, _ = served
    answer = client.get("/api/openapi.json", headers=AUTH)
    assert answer.status_code == 200, answer.text
    doc = answer.json()
    assert doc["openapi"] == "3.1.0"
    validate(doc)
    assert client.get("/api/openapi.json").status_code == 401  # the token, like every route


def test_every_admin_route_the_app_serves_is_documented_and_nothing_else(
    served: tuple[TestClient, dict[str, Any]],
) -> None:
    client, _ = served
    doc = client.get("/api/openapi.json", headers=AUTH).json()
    app = client.app
    served_routes = {
        (route.path.replace(":int", ""), method.lower())
        for route in app.routes  # type: ignore[attr-defined]
        if isinstance(route, Route) and route.path.startswith("/api/admin/")
        for method in route.methods or ()
        if method != "HEAD"
    }
    documented = {(path, method) for path, ops in doc["paths"].items() for method in ops}
    assert served_routes and documented == served_routes
    names = {op["operationId"] for ops in doc["paths"].values() for op in ops.values()}
    assert names == set(DOCS)
    # The guard's rules are in it: the token on every route, CSRF on every mutation.
    assert set(doc["components"]["securitySchemes"]) == {"bearer", "session"}
    for ops in doc["paths"].values():
        for method, op in ops.items():
            assert "401" in op["responses"]
            headers = {p["name"] for p in op["parameters"] if p["in"] == "header"}
            assert ("X-Requested-With" in headers) == (method == "post")


def test_every_documented_operation_answers(served: tuple[TestClient, dict[str, Any]]) -> None:
    client, ids = served
    doc = client.get("/api/openapi.json", headers=AUTH).json()
    values = {"job_id": str(ids["queued"][0]), "name": "nightly"}
    bodies = {"priority": 3, "dry_run": True, "status": "queued"}
    answered = 0
    for template, ops in doc["paths"].items():
        path = template
        for name, value in values.items():
            path = path.replace("{" + name + "}", value)
        for method, op in ops.items():
            body = {}
            if "requestBody" in op:
                props = op["requestBody"]["content"]["application/json"]["schema"]["properties"]
                body = {k: v for k, v in bodies.items() if k in props}
            answer = client.request(method.upper(), path, headers=AUTH, json=body)
            routed = answer.status_code != 405 and not (
                answer.status_code == 404 and answer.json()["error"].startswith("Not Found")
            )
            assert routed, f"{method.upper()} {path}: {answer.status_code} {answer.text}"
            assert answer.status_code < 500, f"{method.upper()} {path}: {answer.text}"
            answered += 1
    assert answered == len(DOCS)
