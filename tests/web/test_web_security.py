"""The dashboard's security model: every route classified, the token, CSRF, read-only mode,
headers, body limits, escaping and an injection corpus — on both backends."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, parse_qsl, quote, urlsplit

import pytest
from starlette.routing import Mount, Route
from starlette.testclient import TestClient

import errands
from errands.web import ROUTES, create_app
from errands.web.middleware import MAX_BODY
from errands.web.server import build
from helpers.support import get_job, is_postgres, sql_rows
from helpers.web import populate, snapshot

TOKEN = "s3cret-token"
JSON = {"content-type": "application/json"}

# The classification this test holds on its own: a route added to the app without being
# added here (and so without someone deciding whether it is public) fails the first test.
PUBLIC = {("/healthz", "GET"), ("/login", "GET"), ("/login", "POST")}
PROTECTED = {
    ("/logout", "POST"),
    ("/metrics", "GET"),
    ("/api/admin/jobs", "GET"),
    ("/api/admin/jobs", "POST"),
    ("/api/admin/jobs/{job_id:int}", "GET"),
    ("/api/admin/jobs/{job_id:int}/retry", "POST"),
    ("/api/admin/jobs/{job_id:int}/cancel", "POST"),
    ("/api/admin/jobs/retry", "POST"),
    ("/api/admin/jobs/cancel", "POST"),
    ("/api/admin/prune", "POST"),
    ("/api/admin/stats", "GET"),
    ("/api/admin/errors", "GET"),
    ("/api/admin/workers", "GET"),
    ("/api/admin/periodic", "GET"),
    ("/api/admin/throughput", "GET"),
    ("/api/admin/charts", "GET"),
    ("/", "GET"),
    ("/jobs", "GET"),
    ("/find", "GET"),
    ("/queues", "GET"),
    ("/queues/pause", "POST"),
    ("/queues/resume", "POST"),
    ("/jobs/{job_id:int}", "GET"),
    ("/jobs/{job_id:int}/payload", "GET"),
    ("/jobs/{job_id:int}/result", "GET"),
    ("/jobs/{job_id:int}/attempts/{attempt:int}/traceback", "GET"),
    ("/jobs/{job_id:int}/retry", "POST"),
    ("/jobs/{job_id:int}/cancel", "POST"),
    ("/jobs/act", "POST"),
    ("/bulk/confirm", "GET"),
    ("/bulk", "POST"),
    ("/failures", "GET"),
    ("/periodic", "GET"),
    ("/periodic/run", "POST"),
    ("/workers", "GET"),
    ("/prune/confirm", "GET"),
    ("/prune", "POST"),
    ("/api/admin/queues", "GET"),
    ("/api/admin/queues/{name}/pause", "POST"),
    ("/api/admin/queues/{name}/resume", "POST"),
    ("/api/admin/limits", "GET"),
    ("/api/openapi.json", "GET"),  # the API's own description (issue #38)
    # the operator's job edits and schedule switches (issue #25)
    ("/api/admin/jobs/{job_id:int}/delete", "POST"),
    ("/api/admin/jobs/{job_id:int}/run_now", "POST"),
    ("/api/admin/jobs/{job_id:int}/priority", "POST"),
    ("/api/admin/jobs/delete", "POST"),
    ("/api/admin/jobs/run_now", "POST"),
    ("/api/admin/jobs/priority", "POST"),
    ("/api/admin/periodic/{name}/disable", "POST"),
    ("/api/admin/periodic/{name}/enable", "POST"),
    ("/api/admin/periodic/{name}/run", "POST"),
    ("/jobs/{job_id:int}/delete", "POST"),
    ("/jobs/{job_id:int}/run_now", "POST"),
    ("/jobs/{job_id:int}/priority", "POST"),
    ("/periodic/disable", "POST"),
    ("/periodic/enable", "POST"),
    # a signal for ctx.wait_for (docs/durable-steps.md)
    ("/api/admin/jobs/{job_id:int}/signal", "POST"),
    # the operator activity log: who did what
    ("/api/admin/activity", "GET"),
    ("/activity", "GET"),
    # a batch's page, its JSON and "retry failed members" (issue #36)
    ("/batches/{job_id:int}", "GET"),
    ("/batches/{job_id:int}/retry", "POST"),
    ("/api/admin/batches/{job_id:int}", "GET"),
    ("/api/admin/batches/{job_id:int}/retry", "POST"),
    # the job page's "send signal" form (issue #36)
    ("/jobs/{job_id:int}/signal", "POST"),
    # limits edited (issue #36)
    ("/api/admin/limits/{key}", "POST"),
    ("/api/admin/limits/{key}/clear", "POST"),
    ("/queues/limit", "POST"),
    ("/queues/limit/clear", "POST"),
}
PUBLIC_MOUNTS = {"/static"}
MUTATIONS = {(e.path, e.methods[0]) for e in ROUTES if e.kind == "mutation"}


def concrete(path: str, ids: dict[str, Any]) -> str:
    path = path.replace("{job_id:int}", str(ids["failed"][0])).replace("{attempt:int}", "1")
    return path.replace("{name}", "default").replace("{key}", "mail")


def schema(url: str) -> list[Any]:
    if is_postgres(url):
        return sql_rows(
            url,
            "SELECT table_name, column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = current_schema() ORDER BY 1, 2",
        )
    return sql_rows(url, "SELECT type, name, sql FROM sqlite_master ORDER BY name")


@pytest.fixture
def jobs(queue: errands.Queue) -> dict[str, Any]:
    return populate(queue)


def test_every_route_is_classified() -> None:
    built = create_app(errands.Queue.__new__(errands.Queue))  # routes only: no database used
    seen, mounts = set(), set()
    for route in built.routes:
        if isinstance(route, Mount):
            mounts.add(route.path)
            continue
        assert isinstance(route, Route)
        for method in route.methods or ():
            if method != "HEAD":
                seen.add((route.path, method))
    assert seen - PUBLIC - PROTECTED == set(), "classify these routes in this test"
    assert (PUBLIC | PROTECTED) - seen == set(), "routes this test expects are gone"
    assert mounts == PUBLIC_MOUNTS
    declared = {(e.path, e.methods[0]): e.access for e in ROUTES}
    assert {k for k, v in declared.items() if v == "public"} == PUBLIC


def test_token_guards_every_protected_route(db_url: str, queue: errands.Queue, jobs: Any) -> None:
    before = snapshot(db_url)
    c = TestClient(create_app(queue, token=TOKEN), follow_redirects=False)
    for path, method in sorted(PROTECTED):
        r = c.request(method, concrete(path, jobs), headers=JSON)
        if method == "GET" and not path.startswith(("/api", "/metrics")):
            location = urlsplit(r.headers["location"])
            assert r.status_code == 303 and location.path == "/login", path
            assert parse_qs(location.query)["next"] == [concrete(path, jobs)], path
        else:
            assert r.status_code == 401, (path, r.status_code)
    for path, method in sorted(PUBLIC):
        r = c.request(method, path)
        if path == "/login":  # the form itself (a POST without the token gets it back, 401)
            assert 'name="token"' in r.text, (path, method)
        else:
            assert r.status_code == 200, path
    assert c.get("/static/dashboard.css").status_code == 200
    assert snapshot(db_url) == before
    # A wrong bearer token is refused too; the right one opens every read.
    assert c.get("/api/admin/stats", headers={"authorization": "Bearer nope"}).status_code == 401
    bearer = {"authorization": f"Bearer {TOKEN}"}
    for path, method in sorted(PROTECTED):
        if method == "GET":
            query = {"action": "retry", "status": "failed"} if path == "/bulk/confirm" else {}
            r = c.get(concrete(path, jobs), headers=bearer, params=query)
            # (a failed job runs after nothing: it is no batch, 404 past the token)
            expected = 303 if path == "/find" else 404 if "/batches/" in path else 200
            assert r.status_code == expected, (path, r.status_code)


def test_login_sets_a_strict_httponly_cookie(queue: errands.Queue, jobs: Any) -> None:
    c = TestClient(create_app(queue, token=TOKEN), follow_redirects=False)
    assert c.post("/login", data={"token": "wrong"}).status_code == 401
    assert "errands_session" not in c.cookies
    r = c.post("/login", data={"token": TOKEN})
    assert r.status_code == 303
    cookie = r.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie
    assert c.get("/").status_code == 200
    assert c.get("/api/admin/stats").status_code == 200
    # A forged cookie is no session.
    forged = TestClient(create_app(queue, token=TOKEN), cookies={"errands_session": "abc.def"})
    assert forged.get("/api/admin/stats").status_code == 401


def test_get_on_a_mutation_is_405(queue: errands.Queue, jobs: Any) -> None:
    c = TestClient(create_app(queue))
    for path, method in MUTATIONS:
        assert method == "POST"
        if (path, "GET") in PROTECTED:  # POST /api/admin/jobs enqueues; GET lists
            continue
        assert c.get(concrete(path, jobs)).status_code == 405, path


def _form_csrf(c: TestClient, path: str) -> str:
    page = c.get(path).text
    match = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    assert match, "the page has no CSRF field"
    return match.group(1)


def test_csrf_refusals_change_nothing(db_url: str, queue: errands.Queue, jobs: Any) -> None:
    failed = jobs["failed"][0]
    c = TestClient(create_app(queue), follow_redirects=False)
    before = snapshot(db_url)
    # JSON API: a simple (form-like) request, a foreign Origin.
    assert c.post(f"/api/admin/jobs/{failed}/retry").status_code == 403
    r = c.post(
        f"/api/admin/jobs/{failed}/retry",
        content=b"status=failed",
        headers={"content-type": "application/x-www-form-urlencoded"},
    )
    assert r.status_code == 403
    for origin in ("https://evil.example", "http://testserver.evil.example", "null"):
        r = c.post(f"/api/admin/jobs/{failed}/retry", headers={**JSON, "origin": origin})
        assert r.status_code == 403, origin
    r = c.post(
        "/api/admin/jobs/retry",
        content=b'{"status": "failed"}',
        headers={"content-type": "text/plain"},
    )
    assert r.status_code == 403
    # HTML forms: no token, a wrong token, a token from another session.
    assert c.post(f"/jobs/{failed}/retry", data={}).status_code == 403
    assert c.post(f"/jobs/{failed}/retry", data={"csrf": "0" * 64}).status_code == 403
    other = TestClient(create_app(queue))
    foreign = _form_csrf(other, f"/jobs/{failed}")
    _form_csrf(c, f"/jobs/{failed}")  # c now has a session of its own
    assert c.post(f"/jobs/{failed}/retry", data={"csrf": foreign}).status_code == 403
    assert c.post("/prune", data={"csrf": foreign}).status_code == 403
    assert snapshot(db_url) == before
    # The page's own token works.
    token = _form_csrf(c, f"/jobs/{failed}")
    assert c.post(f"/jobs/{failed}/retry", data={"csrf": token}).status_code == 303
    assert get_job(queue, failed).status == "queued"
    assert queue.events(failed)[-1].actor == "api"
    # Its own host in Origin is accepted, whatever the scheme (a TLS proxy in front).
    second = jobs["failed"][1]
    r = c.post(f"/api/admin/jobs/{second}/retry", headers={**JSON, "origin": "https://testserver"})
    assert r.status_code == 200


def test_bulk_form_confirms_the_count_then_acts(queue: errands.Queue, jobs: Any) -> None:
    c = TestClient(create_app(queue), follow_redirects=False)
    page = c.get("/bulk/confirm", params={"action": "retry", "status": "failed", "type": "charge"})
    assert re.search(r'id="bulk-count">3<', page.text)
    assert all(get_job(queue, i).status == "failed" for i in jobs["failed"])
    token = _form_csrf(c, "/bulk/confirm?action=retry&status=failed&type=charge")
    fields = {"csrf": token, "action": "retry", "status": "failed", "type": "charge"}
    done = c.post("/bulk", data=fields)
    assert done.status_code == 303  # Post/Redirect/Get: a reload shows, never acts again
    shown = c.get(done.headers["location"])
    assert shown.status_code == 200 and "3 job(s) retried" in shown.text
    assert all(get_job(queue, i).status == "queued" for i in jobs["failed"])


def test_read_only_refuses_every_mutation(db_url: str, queue: errands.Queue, jobs: Any) -> None:
    c = TestClient(create_app(queue, read_only=True), follow_redirects=False)
    page = c.get(f"/jobs/{jobs['failed'][0]}")
    assert 'name="csrf"' not in page.text  # no action buttons in read-only mode
    before = snapshot(db_url)
    for path, method in MUTATIONS:
        api = path.startswith("/api")
        r = c.request(
            method,
            concrete(path, jobs),
            json={"status": "failed"} if api else None,
            data=None if api else {"csrf": "0" * 64, "action": "retry", "status": "failed"},
        )
        assert r.status_code == 403, (path, r.status_code)
    assert snapshot(db_url) == before


def test_security_headers_on_every_kind_of_response(queue: errands.Queue, jobs: Any) -> None:
    c = TestClient(create_app(queue))
    for path in ("/", "/api/admin/stats", "/healthz", "/static/dashboard.js", "/nowhere"):
        r = c.get(path)
        csp = r.headers["content-security-policy"]
        assert "default-src 'self'" in csp and "unsafe-inline" not in csp
        assert r.headers["x-content-type-options"] == "nosniff"
        assert r.headers["x-frame-options"] == "DENY"
    assert "<script>" not in c.get("/").text  # only <script src=…>
    assert re.findall(r"<script[^>]*>", c.get("/").text) == [
        '<script src="http://testserver/static/dashboard.js" defer>'
    ]


def test_oversized_bodies_are_413(db_url: str, queue: errands.Queue, jobs: Any) -> None:
    c = TestClient(create_app(queue))
    before = snapshot(db_url)
    big = b'{"status": "failed", "pad": "' + b"x" * MAX_BODY + b'"}'
    assert c.post("/api/admin/jobs/retry", content=big, headers=JSON).status_code == 413

    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit is counted as it streams
        yield big[: MAX_BODY // 2]
        yield big[MAX_BODY // 2 :]

    assert c.post("/api/admin/jobs/retry", content=chunks(), headers=JSON).status_code == 413
    assert snapshot(db_url) == before


def test_host_auth_replaces_the_token(queue: errands.Queue, jobs: Any) -> None:
    def sync_auth(request: Any) -> bool:
        return bool(request.headers.get("x-user") == "ops")

    async def async_auth(request: Any) -> bool:
        return sync_auth(request)

    for auth in (sync_auth, async_auth):
        c = TestClient(create_app(queue, auth=auth), follow_redirects=False)
        assert c.get("/api/admin/stats").status_code == 401
        assert c.get("/").status_code == 401
        assert c.get("/healthz").status_code == 200
        assert c.get("/api/admin/stats", headers={"x-user": "ops"}).status_code == 200
    with pytest.raises(ValueError, match="not both"):
        create_app(queue, auth=sync_auth, token=TOKEN)


def test_standalone_without_token_accepts_only_loopback_host_names(
    queue: errands.Queue,
) -> None:
    c = TestClient(build(queue, host="127.0.0.1", token=None, read_only=False))
    assert c.get("/healthz", headers={"host": "127.0.0.1:8000"}).status_code == 200
    assert c.get("/healthz", headers={"host": "localhost:8000"}).status_code == 200
    assert c.get("/api/admin/stats", headers={"host": "evil.example"}).status_code == 400


XSS = '<script>alert("x")</script><img src=x onerror=alert(1)>"\'&'


def test_job_values_are_escaped_in_every_page(queue: errands.Queue) -> None:
    job_id = queue.enqueue(XSS, {XSS: XSS}, queue=XSS)
    c = TestClient(create_app(queue))
    pages = [
        "/",
        "/jobs",
        f"/jobs/{job_id}",
        "/jobs?status=queued",
        "/failures",
        f"/bulk/confirm?action=cancel&status=queued&type={XSS}",
    ]
    for path in pages:
        text = c.get(path).text
        assert "<script>alert" not in text and "<img src=x" not in text, path
    assert "&lt;script&gt;alert(" in c.get(f"/jobs/{job_id}").text


CORPUS = [
    "' OR '1'='1",
    "1; DROP TABLE jobs; --",
    '"); DELETE FROM jobs; --',
    "failed' --",
    "\x00",
    "%00",
    "../../etc/passwd",
    "<script>alert(1)</script>",
    "{{7*7}}",
    "${jndi:ldap://x}",
    "-1",
    "0",
    "1e309",
    "NaN",
    "99999999999999999999999999",
    "9223372036854775808",
    "true",
    "[]",
    '{"$ne": 1}',
    "ü\u202e\ufeff",
    "x" * 5000,
]
GET_PARAMS = {
    "/api/admin/jobs": ["status", "type", "queue", "error_code", "q", "view", "limit", "cursor"],
    "/jobs": ["status", "type", "queue", "error_code", "q", "view", "limit", "cursor"],
    "/find": ["q"],
    "/failures?window=7d": ["page"],
    "/": ["window", "type", "queue"],
    "/?window=7d": ["type", "queue"],
    "/api/admin/charts": ["window", "type", "queue"],
    "/api/admin/stats": ["window", "top"],
    "/api/admin/errors": ["window", "since", "page", "top"],
    "/api/admin/throughput": ["hours"],
    "/failures": ["window"],
    "/bulk/confirm": ["action", "status", "type", "queue", "error_code"],
    "/api/admin/activity": ["actor", "action", "limit", "cursor"],
    "/activity": ["actor", "action", "limit", "cursor"],
    "/bulk/confirm?action=priority&status=queued": ["priority", "done", "changed"],
    "/queues": ["limit", "key"],
    "/jobs/1": ["done"],
}


def test_injection_corpus_never_500_and_never_changes_the_schema(
    db_url: str, queue: errands.Queue, jobs: Any
) -> None:
    shape = schema(db_url)
    c = TestClient(create_app(queue), raise_server_exceptions=False)
    codes: set[int] = set()
    for path, names in GET_PARAMS.items():
        for name in names:
            for value in CORPUS:
                extra = {"action": "retry", "status": "failed"} if path == "/bulk/confirm" else {}
                where, _, query = path.partition("?")  # its own query, then the value tried
                extra.update(parse_qsl(query))
                r = c.get(where, params={**extra, name: value})
                codes.add(r.status_code)
                assert r.status_code < 500, (path, name, value[:30], r.status_code)
    for value in CORPUS:
        for path in ("/api/admin/jobs/retry", "/api/admin/jobs/cancel"):
            for key in ("status", "type", "queue", "error_code", "dry_run"):
                body = {"status": "failed", key: value, "dry_run": True}
                r = c.post(path, json=body)
                assert r.status_code < 500, (path, key, value[:30], r.status_code)
        for key in ("running", "rate"):  # limits (issue #36): 400 for anything not a cap
            r = c.post("/api/admin/limits/mail", json={key: value})
            assert r.status_code in (200, 400), (key, value[:30], r.status_code)
            r = c.post("/api/admin/limits/mail", json={"rate": [value, value]})
            assert r.status_code in (200, 400), (value[:30], r.status_code)
        r = c.post(f"/api/admin/limits/{quote(value, safe='')}", json={"running": 1})
        assert r.status_code in (200, 400, 404), (value[:30], r.status_code)
        for path in (
            "/api/admin/jobs/{}",
            "/jobs/{}",
            "/jobs/1/attempts/{}/traceback",
            "/batches/{}",
            "/api/admin/batches/{}",
        ):
            r = c.get(path.format(quote(value, safe="")))
            assert r.status_code == 404, (path, value[:30], r.status_code)
    assert {200, 400} <= codes
    assert schema(db_url) == shape
    assert len(queue.jobs(limit=1000)) == sum(len(v) for v in jobs.values())
