"""What an operator found wrong in the dashboard (issue #25), each fixed behaviour held by a
test on both backends through Starlette's TestClient: Failures lists every group and no
cancellations, every form action redirects (Post/Redirect/Get), one time format, login returns
to the page asked for, styled error pages, read-only dry runs, unknown API parameters refused,
revocable and expiring sessions, a throttle on wrong tokens, and a warning when anyone may act.
"""

from __future__ import annotations

import logging
import re
import time
from html import unescape

import pytest
from starlette.testclient import TestClient

import errands
from errands.web import ROUTES, create_app
from errands.web.fmt import FORMAT
from errands.web.security import FAILURE_WINDOW, MAX_FAILURES, SESSION_MAX_AGE
from helpers.ops import run_job
from helpers.web import populate, snapshot

JSON = {"content-type": "application/json"}
TOKEN = "s3cret-token"


def failures_world(q: errands.Queue, groups: int) -> None:
    """``groups`` failure groups (one type each, 1..groups jobs... kept small: 1 each, plus
    two in the first), and one job cancelled by an operator."""
    now = time.time()
    for i in range(groups):
        for _ in range(2 if i == 0 else 1):
            run_job(
                q,
                f"t{i:03d}",
                run_at=now - 600,
                started=now - 590,
                finished=now - 580,
                outcome="failed",
                error_code="APP:BROKEN",
            )
    q.cancel(q.enqueue("mail", {}, delay=3600), actor="ops")


def rows_of(html: str, table: str) -> int:
    match = re.search(rf'<table class="{table}">(.*?)</table>', html, re.S)
    assert match, f"no table {table}"
    return match.group(1).count("<tr") - 1  # less the header row


def test_failures_lists_every_group_and_no_cancellation(queue: errands.Queue) -> None:
    failures_world(queue, 60)
    c = TestClient(create_app(queue))
    first = c.get("/failures").text
    assert "60 group(s), 61 job(s)" in first
    assert "page 1 of 2" in first and rows_of(first, "failures") == 50
    second = c.get("/failures", params={"page": 2}).text
    assert rows_of(second, "failures") == 10 and "page 2 of 2" in second
    # Each group shows its newest job and the start of its message.
    newest = max(j.id for j in queue.jobs(type="t000", limit=10))
    assert re.search(
        rf'<td class="detail sample"><a href="[^"]*/jobs/{newest}">#{newest}</a> it broke', first
    )
    # No cancellation under Failures or Top errors; the page says where they are.
    for page in (first, second, c.get("/").text):
        assert "CANCELLED" not in page
    assert 'id="cancelled-note">1 cancellation(s)' in first
    # The retry link of a group finds its failed jobs.
    link = re.search(r'href="([^"]*bulk/confirm[^"]*type=t000[^"]*)"', first)
    assert link
    confirm = c.get(unescape(link.group(1)).replace("http://testserver", ""))
    assert re.search(r'id="bulk-count">2<', confirm.text)


def _csrf(c: TestClient, path: str) -> str:
    match = re.search(r'name="csrf" value="([0-9a-f]+)"', c.get(path).text)
    assert match
    return match.group(1)


def test_every_form_action_redirects_and_a_reload_changes_nothing(
    db_url: str, queue: errands.Queue
) -> None:
    ids = populate(queue)

    @queue.periodic(every=3600, name="nightly")
    def nightly() -> None: ...

    later = queue.enqueue("remind", {"n": 9}, delay=3600)
    with queue.batch(on_complete=("remind", {"n": 10})) as batch:
        batch.enqueue("resize", {"n": 10})
    c = TestClient(create_app(queue), follow_redirects=False)
    token = _csrf(c, f"/jobs/{ids['failed'][0]}")
    forms = {
        "/jobs/{job_id:int}/priority": (f"/jobs/{later}/priority", {"priority": "3"}),
        "/jobs/{job_id:int}/run_now": (f"/jobs/{later}/run_now", {}),
        "/jobs/{job_id:int}/delete": (f"/jobs/{ids['ok'][0]}/delete", {}),
        "/periodic/disable": ("/periodic/disable", {"name": "nightly"}),
        "/periodic/enable": ("/periodic/enable", {"name": "nightly"}),
        "/jobs/{job_id:int}/retry": (f"/jobs/{ids['failed'][0]}/retry", {}),
        "/jobs/{job_id:int}/cancel": (f"/jobs/{ids['queued'][0]}/cancel", {}),
        "/bulk": ("/bulk", {"action": "retry", "status": "failed", "type": "charge"}),
        "/prune": ("/prune", {}),
        "/jobs/act": ("/jobs/act", {"action": "cancel", "id": str(ids["queued"][1])}),
        "/periodic/run": ("/periodic/run", {"name": "nightly"}),
        "/queues/pause": ("/queues/pause", {"name": "mail", "reason": "SMTP down"}),
        "/queues/resume": ("/queues/resume", {"name": "mail"}),
        "/queues/limit": ("/queues/limit", {"key": "mail", "running": "2"}),
        "/queues/limit/clear": ("/queues/limit/clear", {"key": "mail"}),
        "/batches/{job_id:int}/retry": (f"/batches/{batch.id}/retry", {}),
        "/jobs/{job_id:int}/signal": (f"/jobs/{later}/signal", {"name": "go", "payload": "1"}),
    }
    html_mutations = {e.path for e in ROUTES if e.kind == "mutation" and not e.api}
    assert html_mutations == set(forms), "a new form action needs its Post/Redirect/Get check"
    for path, data in forms.values():
        r = c.post(path, data={"csrf": token, **data})
        assert r.status_code == 303, (path, r.status_code)
        before = snapshot(db_url)
        for _ in range(2):  # the page it lands on, reloaded: shows, never acts again
            shown = c.get(r.headers["location"].replace("http://testserver", ""))
            assert shown.status_code == 200, path
        assert snapshot(db_url) == before, path
    done = c.get(c.post("/bulk", data={"csrf": token, **forms["/bulk"][1]}).headers["location"])
    assert 'id="bulk-done">0 job(s) retried' in done.text  # all three were retried above


ISO_IN_TEXT = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d")
TIME_TEXT = re.compile(r"<time [^>]*>([^<]*)</time>")
RELATIVE = re.compile(r"^(just now|in .+|.+ ago)$")


def test_one_time_format_with_the_zone_and_ages(queue: errands.Queue) -> None:
    ids = populate(queue)
    from helpers.ops import register_worker

    register_worker(queue, "web-1.4711", at=time.time(), types=["resize"])
    c = TestClient(create_app(queue))
    example = time.strftime(FORMAT, time.gmtime(0))
    assert example.endswith(" UTC")
    pages = ["/", "/jobs", f"/jobs/{ids['failed'][0]}", "/failures", "/workers", "/queues"]
    for path in pages:
        html = c.get(path).text
        text = re.sub(r"<[^>]+>", " ", html)
        assert not ISO_IN_TEXT.search(text), (path, ISO_IN_TEXT.search(text))
        shown = TIME_TEXT.findall(html)
        assert shown or path == "/queues", path
        for value in shown:
            exact = re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", value)
            assert exact or RELATIVE.match(value), (path, value)
    job = c.get(f"/jobs/{ids['failed'][0]}").text
    assert re.search(r"\d\d:\d\d:\d\d UTC</time> <span class=\"ago\">(\d+ s|just now)", job)


def test_login_returns_to_the_page_asked_for(queue: errands.Queue) -> None:
    populate(queue)
    c = TestClient(create_app(queue, token=TOKEN), follow_redirects=False)
    asked = c.get("/jobs", params={"status": "failed"})
    form = c.get(asked.headers["location"]).text
    assert 'name="next" value="/jobs?status=failed"' in form
    r = c.post("/login", data={"token": TOKEN, "next": "/jobs?status=failed"})
    assert r.status_code == 303 and r.headers["location"] == "/jobs?status=failed"
    # Never to another site.
    for evil in ("//evil.example/", "https://evil.example/", "/\\evil.example", "jobs", "/\x01"):
        fresh = TestClient(create_app(queue, token=TOKEN), follow_redirects=False)
        r = fresh.post("/login", data={"token": TOKEN, "next": evil})
        assert r.headers["location"] == "http://testserver/", evil


def test_error_pages_are_styled_with_a_way_back(queue: errands.Queue) -> None:
    populate(queue)
    c = TestClient(create_app(queue))
    for path, status in (
        ("/jobs/999999", 404),
        ("/nowhere", 404),
        ("/jobs?status=dead", 400),
        ("/failures?window=2y", 400),
        ("/jobs/999999/attempts/1/traceback", 404),
    ):
        r = c.get(path)
        assert r.status_code == status, path
        assert r.headers["content-type"].startswith("text/html"), path
        assert "dashboard.css" in r.text and 'id="error-message"' in r.text, path
        assert 'href="http://testserver/"' in r.text, path  # the way back
    api = c.get("/api/admin/nowhere")
    assert api.status_code == 404 and "error" in api.json()
    # The reason may quote the bad value: as text, never markup.
    for path in ("/jobs?status=<script>alert(1)</script>", "/<script>alert(1)</script>"):
        r = c.get(path)
        assert r.status_code in (400, 404) and "<script>alert" not in r.text, path


def test_read_only_answers_dry_runs_and_refuses_the_rest(db_url: str, queue: errands.Queue) -> None:
    populate(queue)
    c = TestClient(create_app(queue, read_only=True))
    before = snapshot(db_url)
    r = c.post("/api/admin/jobs/retry", json={"status": "failed", "dry_run": True})
    assert r.status_code == 200 and r.json()["selected"] == 3 and r.json()["dry_run"] is True
    assert c.post("/api/admin/prune", json={"dry_run": True}).status_code == 200
    for body in ({"status": "failed"}, {"status": "failed", "dry_run": False}, {"dry_run": "1"}):
        assert c.post("/api/admin/jobs/retry", json=body).status_code == 403, body
    assert c.post("/api/admin/jobs/retry", content=b"{nope", headers=JSON).status_code == 403
    # A dry run is still a POST: CSRF rules hold (no JSON content type, a foreign Origin).
    raw = b'{"status": "failed", "dry_run": true}'
    plain = {"content-type": "text/plain"}
    assert c.post("/api/admin/jobs/retry", content=raw, headers=plain).status_code == 403
    evil = {**JSON, "origin": "https://evil.example"}
    assert c.post("/api/admin/jobs/retry", content=raw, headers=evil).status_code == 403
    assert snapshot(db_url) == before


@pytest.mark.parametrize(
    ("path", "query"),
    [
        ("/api/admin/jobs", "stauts=failed"),
        ("/api/admin/jobs", "status=failed&limt=5"),
        ("/api/admin/stats", "windw=1h"),
        ("/api/admin/errors", "top=3&sinse=1h"),
        ("/api/admin/throughput", "hour=3"),
        ("/api/admin/workers", "all=1"),
        ("/api/admin/periodic", "name=x"),
        ("/api/admin/jobs/1", "verbose=1"),
    ],
)
def test_api_refuses_unknown_query_parameters(queue: errands.Queue, path: str, query: str) -> None:
    populate(queue)
    c = TestClient(create_app(queue))
    r = c.get(f"{path}?{query}")
    assert r.status_code == 400, r.text
    unknown = [p.split("=")[0] for p in query.split("&")][-1]
    assert unknown in r.json()["error"] and "takes" in r.json()["error"]
    known = re.sub(r"&?[a-z]+=[^&]*$", "", query)
    assert c.get(f"{path}?{known}").status_code in (200, 404)


def test_logout_ends_the_session_even_for_a_copied_cookie(queue: errands.Queue) -> None:
    populate(queue)
    app = create_app(queue, token=TOKEN)
    c = TestClient(app, follow_redirects=False)
    c.post("/login", data={"token": TOKEN})
    cookie = c.cookies["errands_session"]
    copy = TestClient(app, follow_redirects=False, cookies={"errands_session": cookie})
    assert copy.get("/api/admin/stats").status_code == 200
    assert c.post("/logout").status_code == 303
    assert copy.get("/api/admin/stats").status_code == 401
    assert copy.get("/").status_code == 303  # to the login page
    # A new token ends every session signed with the old one.
    other = TestClient(create_app(queue, token=TOKEN + "-new"), cookies={"errands_session": ""})
    c2 = TestClient(app, follow_redirects=False)
    c2.post("/login", data={"token": TOKEN})
    other.cookies.set("errands_session", c2.cookies["errands_session"])
    assert other.get("/api/admin/stats").status_code == 401


def test_sessions_expire_on_the_server(queue: errands.Queue) -> None:
    populate(queue)
    app = create_app(queue, token=TOKEN)
    guard = app.state.dashboard.guard
    now = [time.time()]
    guard.clock = lambda: now[0]
    c = TestClient(app, follow_redirects=False)
    c.post("/login", data={"token": TOKEN})
    now[0] += SESSION_MAX_AGE - 60
    assert c.get("/api/admin/stats").status_code == 200
    now[0] += 61  # the browser may keep the cookie; the server does not accept it
    assert c.get("/api/admin/stats").status_code == 401
    # A cookie whose issue time was edited no longer matches its signature.
    sid, _issued, sig = c.cookies["errands_session"].split(".")
    forged = f"{sid}.{int(now[0])}.{sig}"
    now[0] -= 120
    assert (
        TestClient(app, cookies={"errands_session": forged}).get("/api/admin/stats").status_code
        == 401
    )


def test_wrong_tokens_are_throttled(db_url: str, queue: errands.Queue) -> None:
    populate(queue)
    app = create_app(queue, token=TOKEN)
    guard = app.state.dashboard.guard
    now = [time.time()]
    guard.clock = lambda: now[0]
    c = TestClient(app, follow_redirects=False)
    for _ in range(MAX_FAILURES - 1):
        assert c.post("/login", data={"token": "guess"}).status_code == 401
    bearer = {"authorization": "Bearer guess"}
    assert c.get("/api/admin/stats", headers=bearer).status_code == 401  # the fifth
    # Now even the right token waits: guessing gains nothing.
    r = c.post("/login", data={"token": TOKEN})
    assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1
    right = {"authorization": f"Bearer {TOKEN}"}
    assert c.get("/api/admin/stats", headers=right).status_code == 429
    now[0] += FAILURE_WINDOW + 1
    assert c.get("/api/admin/stats", headers=right).status_code == 200
    assert c.post("/login", data={"token": TOKEN}).status_code == 303


def test_an_open_dashboard_says_so(queue: errands.Queue, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="errands.web"):
        open_app = create_app(queue)
    assert any("no token and no auth" in r.getMessage() for r in caplog.records)
    assert 'id="open-warning"' in TestClient(open_app).get("/").text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="errands.web"):
        guarded = [
            create_app(queue, token=TOKEN),
            create_app(queue, auth=lambda request: True),
            create_app(queue, allowed_hosts=["testserver"]),
        ]
    assert not caplog.records
    page = TestClient(guarded[1]).get("/").text
    assert "open-warning" not in page
