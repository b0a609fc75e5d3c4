"""The operator activity log through the dashboard (docs/dashboard.md, "Activity"), on both
backends: every mutation route leaves exactly one row whose actor is who acted (a labelled
token, over Bearer or a logged-in session; the user an auth callable names), and the log reads
back through GET /api/admin/activity and the /activity page."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

import errands
from errands.web import create_app
from errands.web.app import ROUTES
from helpers.ops import HOUR

TOKENS = {"deploy-bot": "tok-bot-123", "alice": "tok-alice-456"}
BEARER = {"authorization": "Bearer tok-bot-123", "content-type": "application/json"}


def world(q: errands.Queue) -> dict[str, Any]:
    @q.task
    def work(n: int) -> None: ...

    @q.periodic(every=HOUR)
    def hourly() -> None: ...

    cancelled = work.enqueue(n=0)
    q.cancel(cancelled, actor="setup")
    later = q.enqueue("work", {"n": 1}, delay=HOUR)
    queued = work.enqueue(n=2)
    q.pause("paused", actor="setup")
    with q.batch(on_complete=("work", {"n": 3})) as batch:
        batch.enqueue("work", {"n": 4})
    q.cancel(batch.ids[0], actor="setup")
    return {"cancelled": cancelled, "later": later, "queued": queued, "batch": batch.id}


def fill(path: str, w: dict[str, Any], job: str) -> str:
    path = path.replace("{job_id:int}", str(w[job])).replace("{name}", "hourly")
    return path.replace("{key}", "mail")


# Each mutation route: (the job its {job_id} names, its JSON body or form fields, the action
# its row names). A route added to the app without a line here fails the first test.
API_CASES: dict[tuple[str, str], tuple[str, dict[str, Any], str]] = {
    ("/api/admin/jobs", "POST"): ("queued", {"type": "work", "payload": {"n": 9}}, "enqueue"),
    ("/api/admin/jobs/{job_id:int}/retry", "POST"): ("cancelled", {}, "retry"),
    ("/api/admin/jobs/{job_id:int}/cancel", "POST"): ("queued", {}, "cancel"),
    ("/api/admin/jobs/retry", "POST"): ("queued", {"status": "cancelled"}, "retry"),
    ("/api/admin/jobs/cancel", "POST"): ("queued", {"status": "queued"}, "cancel"),
    ("/api/admin/jobs/{job_id:int}/signal", "POST"): ("queued", {"name": "go"}, "signal"),
    ("/api/admin/jobs/{job_id:int}/delete", "POST"): ("cancelled", {}, "delete"),
    ("/api/admin/jobs/{job_id:int}/run_now", "POST"): ("later", {}, "run_now"),
    ("/api/admin/jobs/{job_id:int}/priority", "POST"): ("later", {"priority": 4}, "priority"),
    ("/api/admin/jobs/delete", "POST"): ("queued", {"status": "cancelled"}, "delete"),
    ("/api/admin/jobs/run_now", "POST"): ("queued", {"status": "queued"}, "run_now"),
    ("/api/admin/jobs/priority", "POST"): (
        "queued",
        {"status": "queued", "priority": 2},
        "priority",
    ),
    ("/api/admin/periodic/{name}/disable", "POST"): ("queued", {}, "periodic_disable"),
    ("/api/admin/periodic/{name}/enable", "POST"): ("queued", {}, "periodic_enable"),
    ("/api/admin/periodic/{name}/run", "POST"): ("queued", {}, "periodic_run"),
    ("/api/admin/prune", "POST"): ("queued", {}, "prune"),
    ("/api/admin/queues/{name}/pause", "POST"): ("queued", {"reason": "deploy"}, "pause"),
    ("/api/admin/queues/{name}/resume", "POST"): ("queued", {}, "resume"),
    ("/api/admin/batches/{job_id:int}/retry", "POST"): ("batch", {}, "retry"),
    ("/api/admin/limits/{key}", "POST"): ("queued", {"running": 2}, "set_limit"),
    ("/api/admin/limits/{key}/clear", "POST"): ("queued", {}, "clear_limit"),
}
PAGE_CASES: dict[tuple[str, str], tuple[str, dict[str, Any], str]] = {
    ("/jobs/{job_id:int}/retry", "POST"): ("cancelled", {}, "retry"),
    ("/jobs/{job_id:int}/cancel", "POST"): ("queued", {}, "cancel"),
    ("/jobs/{job_id:int}/delete", "POST"): ("cancelled", {}, "delete"),
    ("/jobs/{job_id:int}/run_now", "POST"): ("later", {}, "run_now"),
    ("/jobs/{job_id:int}/priority", "POST"): ("later", {"priority": "3"}, "priority"),
    ("/jobs/act", "POST"): ("queued", {"action": "cancel", "id": "{queued}"}, "cancel"),
    ("/bulk", "POST"): ("queued", {"action": "retry", "status": "cancelled"}, "retry"),
    ("/queues/pause", "POST"): ("queued", {"name": "default", "reason": "x"}, "pause"),
    ("/queues/resume", "POST"): ("queued", {"name": "paused"}, "resume"),
    ("/periodic/run", "POST"): ("queued", {"name": "hourly"}, "periodic_run"),
    ("/periodic/disable", "POST"): ("queued", {"name": "hourly"}, "periodic_disable"),
    ("/periodic/enable", "POST"): ("queued", {"name": "hourly"}, "periodic_enable"),
    ("/prune", "POST"): ("queued", {}, "prune"),
    ("/batches/{job_id:int}/retry", "POST"): ("batch", {}, "retry"),
    ("/jobs/{job_id:int}/signal", "POST"): ("queued", {"name": "go"}, "signal"),
    ("/queues/limit", "POST"): ("queued", {"key": "mail", "running": "2"}, "set_limit"),
    ("/queues/limit/clear", "POST"): ("queued", {"key": "mail"}, "clear_limit"),
}
MUTATIONS = {(e.path, e.methods[0]) for e in ROUTES if e.kind == "mutation"}


def test_every_mutation_route_is_in_the_table() -> None:
    assert MUTATIONS - set(API_CASES) - set(PAGE_CASES) == set(), "add these routes' cases"
    assert set(API_CASES) | set(PAGE_CASES) <= MUTATIONS


@pytest.fixture
def client(queue: errands.Queue) -> Iterator[tuple[errands.Queue, TestClient]]:
    with TestClient(create_app(queue, token=TOKENS)) as c:
        yield queue, c


def login(c: TestClient, token: str) -> str:
    """Log in through the form; the CSRF token of the session it opened."""
    r = c.post("/login", data={"token": token, "next": "/"}, follow_redirects=False)
    assert r.status_code == 303
    match = re.search(r'name="csrf" value="([0-9a-f]+)"', c.get("/queues").text)
    assert match is not None
    return match.group(1)


@pytest.mark.parametrize("route", sorted(API_CASES), ids=lambda r: r[0])
def test_each_api_mutation_leaves_one_row_named_by_the_token_label(
    client: Any, route: tuple[str, str]
) -> None:
    q, c = client
    w = world(q)
    job, body, action = API_CASES[route]
    before = len(q.activity(limit=1000))
    path = fill(route[0], w, job)
    if route[0].startswith("/api/admin/queues/"):
        path = path.replace("hourly", "paused" if action == "resume" else "default")
    r = c.post(path, json=body, headers=BEARER)
    assert r.status_code < 300, (path, r.text)
    rows = q.activity(limit=1000)
    assert len(rows) == before + 1
    assert (rows[0].actor, rows[0].action) == ("deploy-bot", action)


@pytest.mark.parametrize("route", sorted(PAGE_CASES), ids=lambda r: r[0])
def test_each_page_mutation_leaves_one_row_named_by_the_session_label(
    client: Any, route: tuple[str, str]
) -> None:
    q, c = client
    w = world(q)
    csrf = login(c, TOKENS["alice"])
    job, fields, action = PAGE_CASES[route]
    data = {k: str(v).format(**w) for k, v in fields.items()}
    before = len(q.activity(limit=1000))
    r = c.post(fill(route[0], w, job), data={**data, "csrf": csrf}, follow_redirects=False)
    assert r.status_code == 303, r.text
    rows = q.activity(limit=1000)
    assert len(rows) == before + 1
    assert (rows[0].actor, rows[0].action) == ("alice", action)


def test_job_events_written_from_the_dashboard_carry_the_label(client: Any) -> None:
    q, c = client
    w = world(q)
    c.post(f"/api/admin/jobs/{w['cancelled']}/retry", headers=BEARER)
    assert q.events(w["cancelled"])[-1].actor == "deploy-bot"
    csrf = login(c, TOKENS["alice"])
    c.post(f"/jobs/{w['later']}/priority", data={"csrf": csrf, "priority": "7"})
    assert q.events(w["later"])[-1].actor == "alice"


def test_a_refused_mutation_leaves_no_row(client: Any) -> None:
    q, c = client
    w = world(q)
    before = len(q.activity(limit=1000))
    assert c.post(f"/api/admin/jobs/{w['queued']}/retry", headers=BEARER).status_code == 409
    bad = {"authorization": "Bearer wrong", "content-type": "application/json"}
    assert c.post("/api/admin/queues/default/pause", json={}, headers=bad).status_code == 401
    # the retry was tried, on a job it cannot retry: one row, changing nothing
    rows = q.activity(limit=1000)
    assert [(r.action, r.count) for r in rows[: len(rows) - before]] == [("retry", 0)]


def test_an_unlabelled_token_acts_as_api(queue: errands.Queue) -> None:
    with TestClient(create_app(queue, token="plain-token")) as c:
        r = c.post(
            "/api/admin/queues/default/pause",
            json={},
            headers={"authorization": "Bearer plain-token", "content-type": "application/json"},
        )
        assert r.status_code == 200
    assert queue.activity()[0].actor == "api"


def test_an_auth_callable_names_the_user(queue: errands.Queue) -> None:
    def auth(request: Any) -> str | bool:
        return request.headers.get("x-user") or False

    with TestClient(create_app(queue, auth=auth)) as c:
        headers = {"x-user": "sso:carol", "content-type": "application/json"}
        assert c.post("/api/admin/queues/default/pause", json={}, headers=headers).is_success
        assert c.post("/api/admin/queues/default/resume", json={}).status_code == 401
    assert [(r.actor, r.action) for r in queue.activity()] == [("sso:carol", "pause")]


def test_token_labels_are_checked(queue: errands.Queue) -> None:
    for bad in ({}, {"": "x"}, {"a": ""}, {"a": "same", "b": "same"}, {"x" * 65: "t"}):
        with pytest.raises(ValueError, match="token"):
            create_app(queue, token=bad)


def test_the_api_lists_newest_first_with_filters_and_a_cursor(client: Any) -> None:
    q, c = client
    for i in range(5):
        q.pause(f"q{i}", actor="alice" if i % 2 else "bob")
    auth = {"authorization": BEARER["authorization"]}
    body = c.get("/api/admin/activity?limit=2", headers=auth).json()
    assert [e["target"] for e in body["activity"]] == ["q4", "q3"]
    assert all("actor" in e for e in body["activity"])
    more = c.get(f"/api/admin/activity?cursor={body['next_cursor']}", headers=auth).json()
    assert [e["target"] for e in more["activity"]] == ["q2", "q1", "q0"]
    assert more["next_cursor"] is None
    alice = c.get("/api/admin/activity?actor=alice", headers=auth).json()["activity"]
    assert [e["target"] for e in alice] == ["q3", "q1"]
    assert c.get("/api/admin/activity?action=prune", headers=auth).json()["activity"] == []
    assert c.get("/api/admin/activity?who=alice", headers=auth).status_code == 400
    assert c.get("/api/admin/activity").status_code == 401


def test_the_page_shows_who_did_what_and_filters(client: Any) -> None:
    q, c = client
    w = world(q)
    q.retry(w["cancelled"], actor="<b>mallory</b>")
    login(c, TOKENS["alice"])
    page = c.get("/activity")
    assert page.status_code == 200
    assert '/activity" class="current">Activity</a>' in page.text
    assert "&lt;b&gt;mallory&lt;/b&gt;" in page.text and "<b>mallory" not in page.text
    assert f'/jobs/{w["cancelled"]}">#{w["cancelled"]}</a>' in page.text
    only = c.get("/activity", params={"actor": "setup"}).text
    assert "mallory" not in only.split("</select>")[-1] and "pause" in only
    assert c.get("/activity", params={"limit": "x"}).status_code == 400
