"""The dashboard's job edits and schedule switches (issue #25), JSON and HTML, on both backends:
what each does, what each refuses, and that every one is refused cross-origin, without its
CSRF token and in read-only mode with the rows unchanged; values shown are escaped."""

from __future__ import annotations

import logging
import re
from typing import Any
from urllib.parse import urlencode

import pytest
from starlette.testclient import TestClient

import errands
from errands.web import create_app
from helpers.support import event_names, get_job, sql_rows
from helpers.web import populate, snapshot

JSON = {"content-type": "application/json"}
HOSTILE = '<script>alert(1)</script><img src=x onerror="alert(2)">{{7*7}}'


def rows(url: str) -> list[Any]:
    """Everything these actions could change: the jobs (state, priority, run_at), the audit
    log and attempts, and the schedules' switches."""
    return [
        *snapshot(url),
        sql_rows(url, "SELECT id, priority FROM jobs ORDER BY id"),
        sql_rows(url, "SELECT name, disabled_at, disabled_by, next_run_at FROM periodic"),
    ]


@pytest.fixture
def jobs(queue: errands.Queue) -> dict[str, Any]:
    made = populate(queue)

    @queue.periodic(every=3600, name="nightly")
    def nightly() -> None: ...

    return made


def _csrf(c: TestClient, path: str) -> str:
    match = re.search(r'name="csrf" value="([0-9a-f]+)"', c.get(path).text)
    assert match, f"{path} has no CSRF field"
    return match.group(1)


# -- JSON ----------------------------------------------------------------------------------------


def test_json_edits_of_one_job(
    queue: errands.Queue, jobs: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    c = TestClient(create_app(queue))
    later, other = jobs["queued"]
    r = c.post(f"/api/admin/jobs/{later}/run_now", headers=JSON)
    assert r.status_code == 200 and r.json() == {"id": later, "result": "due_now"}
    assert event_names(queue, later)[-1] == "RESCHEDULED"
    assert queue.events(later)[-1].actor == "api"
    again = c.post(f"/api/admin/jobs/{later}/run_now", headers=JSON)
    assert again.status_code == 409 and "already due" in again.json()["error"]

    r = c.post(f"/api/admin/jobs/{other}/priority", json={"priority": -3})
    assert r.json() == {"id": other, "result": "priority_changed", "priority": -3}
    assert get_job(queue, other).priority == -3
    for bad in ({"priority": 2**31}, {"priority": "high"}, {"priority": True}, {}):
        r = c.post(f"/api/admin/jobs/{other}/priority", json=bad)
        assert r.status_code == 400 and "priority" in r.json()["error"], bad
    done = jobs["ok"][0]
    r = c.post(f"/api/admin/jobs/{done}/priority", json={"priority": 1})
    assert r.status_code == 409 and "succeeded" in r.json()["error"]

    with caplog.at_level(logging.INFO, logger="errands"):
        r = c.post(f"/api/admin/jobs/{done}/delete", headers=JSON)
    assert r.json() == {"id": done, "result": "deleted"} and queue.get(done) is None
    assert f"jobs deleted by api: {done}" in [rec.getMessage() for rec in caplog.records]
    assert c.post(f"/api/admin/jobs/{done}/delete", headers=JSON).status_code == 404
    assert c.post("/api/admin/jobs/99999999/run_now", headers=JSON).status_code == 404


def test_json_bulk_edits_by_ids_or_filters_with_dry_run(
    db_url: str, queue: errands.Queue, jobs: dict[str, Any]
) -> None:
    c = TestClient(create_app(queue))
    before = rows(db_url)
    r = c.post("/api/admin/jobs/delete", json={"status": "failed", "dry_run": True})
    assert r.json()["selected"] == 3 and r.json()["dry_run"] is True
    assert rows(db_url) == before
    r = c.post("/api/admin/jobs/priority", json={"status": "queued", "priority": 9})
    assert r.json()["changed"] == 2 and r.json()["refused"] == {}
    assert {get_job(queue, i).priority for i in jobs["queued"]} == {9}
    mixed = [*jobs["queued"], jobs["ok"][0], 424242]
    r = c.post("/api/admin/jobs/run_now", json={"ids": mixed})
    body = r.json()
    assert (body["selected"], body["changed"], body["skipped"]) == (4, 2, 2)
    assert set(body["refused"]) == {str(jobs["ok"][0]), "424242"}
    r = c.post("/api/admin/jobs/delete", json={"status": "failed", "type": "charge"})
    assert r.json()["changed"] == 3 and all(queue.get(i) is None for i in jobs["failed"])
    # bad bodies: 400, nothing done
    before = rows(db_url)
    bodies: list[dict[str, Any]] = [
        {"ids": [1], "status": "queued"},
        {"ids": []},
        {"ids": [0]},
        {"ids": ["1"]},
        {"ids": list(range(1, 10_002))},
        {"status": "running"},  # delete never selects running jobs
        {},
    ]
    for bad in bodies:
        r = c.post("/api/admin/jobs/delete", json=bad)
        assert r.status_code == 400, bad
    assert c.post("/api/admin/jobs/priority", json={"ids": [1]}).status_code == 400
    assert rows(db_url) == before


def test_json_periodic_switches(queue: errands.Queue, jobs: dict[str, Any]) -> None:
    c = TestClient(create_app(queue))
    r = c.post("/api/admin/periodic/nightly/disable", headers=JSON)
    assert r.json() == {"name": "nightly", "result": "disabled"}
    r = c.post("/api/admin/periodic/nightly/disable", headers=JSON)
    assert r.json()["result"] == "already_disabled"
    (shown,) = c.get("/api/admin/periodic").json()["periodic"]
    assert (shown["disabled"], shown["disabled_by"]) == (True, "api")
    assert c.get("/api/admin/stats").json()["periodic_disabled"][0]["name"] == "nightly"
    r = c.post("/api/admin/periodic/nightly/run", headers=JSON)
    assert r.json()["result"] == "enqueued"
    job = get_job(queue, r.json()["id"])
    assert job.type == "nightly" and job.headers == {"periodic": "nightly", "trigger": "manual"}
    r = c.post("/api/admin/periodic/nightly/enable", headers=JSON)
    assert r.json() == {"name": "nightly", "result": "enabled"}
    r = c.post("/api/admin/periodic/nope/run", headers=JSON)
    assert r.status_code == 404 and "no periodic schedule" in r.json()["error"]


# -- refusals: cross-origin, no CSRF token, read-only --------------------------------------------

API_EDITS = [
    ("/api/admin/jobs/{queued}/delete", {}),
    ("/api/admin/jobs/{queued}/run_now", {}),
    ("/api/admin/jobs/{queued}/priority", {"priority": 5}),
    ("/api/admin/jobs/delete", {"status": "failed"}),
    ("/api/admin/jobs/run_now", {"status": "queued"}),
    ("/api/admin/jobs/priority", {"status": "queued", "priority": 5}),
    ("/api/admin/periodic/nightly/disable", {}),
    ("/api/admin/periodic/nightly/run", {}),
]
PAGE_EDITS = [
    ("/jobs/{queued}/delete", {}),
    ("/jobs/{queued}/run_now", {}),
    ("/jobs/{queued}/priority", {"priority": "5"}),
    ("/jobs/act", {"action": "delete", "id": "{queued}"}),
    ("/jobs/act", {"action": "priority", "priority": "5", "id": "{queued}"}),
    ("/periodic/disable", {"name": "nightly"}),
    ("/periodic/run", {"name": "nightly"}),
]


def _fill(text: str, jobs: dict[str, Any]) -> str:
    return text.replace("{queued}", str(jobs["queued"][0]))


def test_every_new_mutation_is_refused_cross_origin_and_without_csrf(
    db_url: str, queue: errands.Queue, jobs: dict[str, Any]
) -> None:
    c = TestClient(create_app(queue), follow_redirects=False)
    token = _csrf(c, f"/jobs/{jobs['queued'][0]}")
    before = rows(db_url)
    for path, body in API_EDITS:
        url = _fill(path, jobs)
        for origin in ("https://evil.example", "null"):
            r = c.post(url, json=body, headers={"origin": origin})
            assert r.status_code == 403, (url, origin)
        # a "simple" request (a form post from another site could send one)
        r = c.post(url, content=b"x=1", headers={"content-type": "text/plain"})
        assert r.status_code == 403, url
    for path, fields in PAGE_EDITS:
        url = _fill(path, jobs)
        data = {k: _fill(v, jobs) for k, v in fields.items()}
        assert c.post(url, data=data).status_code == 403, url  # no CSRF token
        assert c.post(url, data={**data, "csrf": "0" * 64}).status_code == 403, url
        r = c.post(url, data={**data, "csrf": token}, headers={"origin": "https://evil.example"})
        assert r.status_code == 403, url
    assert rows(db_url) == before


def test_every_new_mutation_is_refused_read_only_but_a_dry_run_counts(
    db_url: str, queue: errands.Queue, jobs: dict[str, Any]
) -> None:
    c = TestClient(create_app(queue, read_only=True), follow_redirects=False)
    page = c.get(f"/jobs/{jobs['queued'][0]}").text
    assert "Run now" not in page and "Delete" not in page and "Set priority" not in page
    assert "Disable" not in c.get("/periodic").text
    before = rows(db_url)
    for path, body in API_EDITS:
        r = c.post(_fill(path, jobs), json=body)
        assert r.status_code == 403 and "read-only" in r.json()["error"], path
    for path, fields in PAGE_EDITS:
        data = {k: _fill(v, jobs) for k, v in fields.items()}
        assert c.post(_fill(path, jobs), data={**data, "csrf": "0" * 64}).status_code == 403
    r = c.post("/api/admin/jobs/delete", json={"status": "failed", "dry_run": True})
    assert r.status_code == 200 and r.json()["selected"] == 3
    assert rows(db_url) == before


# -- HTML: the job page, the ticked rows, the periodic page (Post/Redirect/Get) -------------------


def test_job_page_buttons_and_commands_then_redirects(
    queue: errands.Queue, jobs: dict[str, Any]
) -> None:
    c = TestClient(create_app(queue), follow_redirects=False)
    later = jobs["queued"][0]
    page = c.get(f"/jobs/{later}").text
    for command in (
        f"errands run-now {later}",
        f"errands priority 0 {later}",
        f"errands delete {later}",
    ):
        assert f'data-copy="{command}"' in page
    token = _csrf(c, f"/jobs/{later}")
    r = c.post(f"/jobs/{later}/priority", data={"csrf": token, "priority": "-7"})
    assert r.status_code == 303 and r.headers["location"].endswith(f"/jobs/{later}?done=priority")
    assert 'id="job-done">Priority changed.' in c.get(r.headers["location"]).text
    assert get_job(queue, later).priority == -7
    r = c.post(f"/jobs/{later}/run_now", data={"csrf": token})
    assert r.status_code == 303
    page = c.get(f"/jobs/{later}").text
    assert "RESCHEDULED" in page and "PRIORITY_CHANGED" in page
    assert f"errands run-now {later}" not in page  # due now: nothing to run sooner
    bad = c.post(f"/jobs/{later}/priority", data={"csrf": token, "priority": "1e9"})
    assert bad.status_code == 400 and "priority must be a whole number" in bad.text
    r = c.post(f"/jobs/{later}/delete", data={"csrf": token})
    assert r.status_code == 303 and r.headers["location"].endswith(f"/jobs?deleted={later}")
    assert f"Job #{later} deleted" in c.get(r.headers["location"]).text
    assert queue.get(later) is None
    gone = c.post(f"/jobs/{later}/delete", data={"csrf": token})
    assert gone.status_code == 404


def _act(c: TestClient, fields: list[tuple[str, str]]) -> Any:
    form = {"content-type": "application/x-www-form-urlencoded"}
    return c.post("/jobs/act", content=urlencode(fields), headers=form)


def test_ticked_rows_delete_run_now_and_priority(
    queue: errands.Queue, jobs: dict[str, Any]
) -> None:
    c = TestClient(create_app(queue), follow_redirects=False)
    token = _csrf(c, "/jobs?status=queued")
    a, b = jobs["queued"]
    back = "/jobs?status=queued"
    fields = [("csrf", token), ("back", back), ("action", "priority"), ("priority", "4")]
    r = _act(c, [*fields, ("id", str(a)), ("id", str(b))])
    assert r.status_code == 303
    assert "2 job(s) given the new priority" in c.get(r.headers["location"]).text
    assert {get_job(queue, a).priority, get_job(queue, b).priority} == {4}
    fields = [("csrf", token), ("back", back), ("action", "run_now")]
    ids = [("id", str(a)), ("id", str(jobs["ok"][0]))]
    r = _act(c, [*fields, *ids])
    shown = c.get(r.headers["location"]).text
    assert "1 job(s) made due now, 1 skipped" in shown
    fields = [("csrf", token), ("back", back), ("action", "delete")]
    r = _act(c, [*fields, ("id", str(a)), ("id", str(b))])
    assert "2 job(s) deleted" in c.get(r.headers["location"]).text
    assert queue.get(a) is None and queue.get(b) is None


def test_periodic_page_disable_enable_run_and_links(
    queue: errands.Queue, jobs: dict[str, Any]
) -> None:
    c = TestClient(create_app(queue), follow_redirects=False)
    token = _csrf(c, "/periodic")
    page = c.get("/periodic").text
    assert "/jobs?type=nightly&amp;queue=default" in page  # its runs
    assert "PAY:DECLINED" not in page  # another type's errors are not its last error
    r = c.post("/periodic/disable", data={"csrf": token, "name": "nightly"})
    assert r.status_code == 303
    page = c.get(r.headers["location"]).text
    assert "Schedule nightly disabled" in page and 'class="badge">disabled<' in page
    assert "none while disabled" in page
    assert ">Enable<" in page
    r = c.post("/periodic/run", data={"csrf": token, "name": "nightly"})
    ran = int(re.search(r"ran=(\d+)", r.headers["location"]).group(1))  # type: ignore[union-attr]
    assert "(manual)" in c.get(r.headers["location"]).text
    assert get_job(queue, ran).headers == {"periodic": "nightly", "trigger": "manual"}
    r = c.post("/periodic/enable", data={"csrf": token, "name": "nightly"})
    assert "Schedule nightly enabled" in c.get(r.headers["location"]).text
    assert c.post("/periodic/disable", data={"csrf": token, "name": ""}).status_code == 400
    assert c.post("/periodic/run", data={"csrf": token, "name": "nope"}).status_code == 404


def test_a_schedules_last_error_is_linked(queue: errands.Queue) -> None:
    @queue.periodic(every=3600, name="sync")
    def sync() -> None:
        raise errands.JobError("SYNC:DOWN", "upstream down", retry=False)

    queue.run_periodic("sync")
    queue.run_worker(burst=True, concurrency=1, handle_signals=False)
    page = TestClient(create_app(queue)).get("/periodic").text
    assert "/jobs?type=sync&amp;error_code=SYNC%3ADOWN" in page


def test_hostile_names_and_actors_are_escaped(db_url: str, queue: errands.Queue) -> None:
    job_id = queue.enqueue("t", {}, delay=60)
    queue.periodic(every=3600, name=HOSTILE)(lambda: None)
    queue.disable_periodic(HOSTILE, actor=HOSTILE)
    queue.set_priority(3, job_id, actor=HOSTILE)
    queue.run_now(job_id, actor=HOSTILE)
    c = TestClient(create_app(queue), follow_redirects=False)
    token = _csrf(c, "/periodic")
    disabled = c.get("/periodic").text
    assert 'class="badge">disabled<' in disabled  # by HOSTILE, shown as text
    r = c.post("/periodic/enable", data={"csrf": token, "name": HOSTILE})
    assert r.status_code == 303
    for page in (disabled, c.get(r.headers["location"]).text):
        assert "<script>alert(1)" not in page and "<img src=x" not in page
        assert "&lt;script&gt;" in page
    page = c.get(f"/jobs/{job_id}").text
    assert "<script>alert(1)" not in page and "&lt;script&gt;" in page
    assert "{{7*7}}" in page or "49" not in page  # a template expression stays text
