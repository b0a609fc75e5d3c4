"""Limits edited from the dashboard (issue #36), on both backends: the JSON API sets and clears
a key's running cap and rate, the queues page does the same with forms and says what it did,
each limit shows its per-group running/waiting beside it, bad input is a 400 that names the
field, and every refusal (read-only, CSRF, cross-origin) changes nothing."""

from __future__ import annotations

import re
from typing import Any

from starlette.testclient import TestClient

import errands
from errands.web import create_app
from helpers.support import sql_rows
from helpers.web import snapshot

JSON = {"content-type": "application/json"}
HOSTILE = '<script>alert(1)</script>"&'


def _csrf(c: TestClient) -> str:
    match = re.search(r'name="csrf" value="([0-9a-f]+)"', c.get("/queues").text)
    assert match, "the queues page has no CSRF field"
    return match.group(1)


def _mail_jobs(queue: errands.Queue) -> None:
    """Three waiting jobs of a limited task in two groups (no worker: all wait)."""

    @queue.task(limit=errands.Limit("mail", running=2, group="tenant"))
    def send(tenant: str) -> None: ...

    for tenant in ("acme", "acme", "zeta"):
        send.enqueue(tenant=tenant)


def _limit(c: TestClient, key: str) -> dict[str, Any] | None:
    return next((x for x in c.get("/api/admin/limits").json()["limits"] if x["key"] == key), None)


def test_the_json_api_sets_and_clears_a_limit(queue: errands.Queue) -> None:
    _mail_jobs(queue)
    c = TestClient(create_app(queue))
    r = c.post("/api/admin/limits/mail", json={"running": 5})
    assert r.status_code == 200
    body = r.json()
    assert body["result"] == "set" and body["limit"]["running"] == 5
    assert body["limit"]["source"] == "set" and body["limit"]["set_by"] == "api"
    assert body["limit"]["rate"] is None
    r = c.post("/api/admin/limits/mail", json={"rate": [10, 60]})
    assert r.json()["limit"]["rate"] == [10, 60.0] and r.json()["limit"]["running"] is None
    both = c.post("/api/admin/limits/mail", json={"running": 1, "rate": [3, 1.5]}).json()
    assert (both["limit"]["running"], both["limit"]["rate"]) == (1, [3, 1.5])
    assert [x.running for x in queue.limits() if x.key == "mail"] == [1]
    r = c.post("/api/admin/limits/mail/clear", headers=JSON)
    assert r.json() == {"key": "mail", "result": "cleared"}
    mail = _limit(c, "mail")  # the code's caps are known once a worker declares them
    assert mail and mail["source"] == "code" and mail["running"] is None
    again = c.post("/api/admin/limits/mail/clear", headers=JSON)
    assert again.json() == {"key": "mail", "result": "not_set"}
    # A key no task declares may be set too (ahead of a deploy), and cleared.
    assert c.post("/api/admin/limits/pdf", json={"running": 0}).json()["limit"]["running"] == 0


def test_bad_limits_are_400_naming_the_field_and_change_nothing(
    db_url: str, queue: errands.Queue
) -> None:
    c = TestClient(create_app(queue))
    before = snapshot(db_url)
    for body, word in (
        ({}, "caps nothing"),
        ({"running": -1}, "running"),
        ({"running": "many"}, "running"),
        ({"running": "5"}, "running"),  # JSON takes numbers (the form's text is its own)
        ({"running": True}, "running"),
        ({"rate": [1, 0]}, "rate"),
        ({"rate": [0, 60]}, "rate"),
        ({"rate": 5}, "rate"),
        ({"rate": [1, "x"]}, "rate seconds"),
        ({"running": 1, "burst": 2}, "burst"),
    ):
        r = c.post("/api/admin/limits/mail", json=body)
        assert r.status_code == 400 and word in r.json()["error"], (body, r.text)
    assert snapshot(db_url) == before


def test_the_queues_page_sets_and_clears_with_group_counts_beside(queue: errands.Queue) -> None:
    _mail_jobs(queue)
    c = TestClient(create_app(queue))
    page = c.get("/queues").text
    row = re.search(r'<tr data-key="mail">(.*?)</tr>', page, re.S)
    assert row and "acme: 0 / 2" in row.group(1) and "zeta: 0 / 1" in row.group(1)
    assert 'class="inline limit-set"' in row.group(1) and "limit-clear" not in row.group(1)
    token = _csrf(c)
    fields = {"csrf": token, "key": "mail", "running": "7", "rate_n": "20", "rate_seconds": "60"}
    r = c.post("/queues/limit", data=fields, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"].endswith("/queues?limit=set&key=mail")
    page = c.get(r.headers["location"]).text
    assert re.search(r'id="limit-done">Limit <b>mail</b> stored', page)
    mail = _limit(c, "mail")
    assert mail and (mail["running"], mail["rate"], mail["source"]) == (7, [20, 60.0], "set")
    row = re.search(r'<tr data-key="mail">(.*?)</tr>', page, re.S)
    assert row and "limit-clear" in row.group(1)
    # Blank running with a rate: the rate alone; half a rate is refused.
    blank = {**fields, "running": "", "rate_n": "5", "rate_seconds": "1"}
    assert c.post("/queues/limit", data=blank).status_code == 200
    mail = _limit(c, "mail")
    assert mail and mail["running"] is None and mail["rate"] == [5, 1.0]
    half = c.post("/queues/limit", data={**fields, "rate_seconds": ""})
    assert half.status_code == 400 and "a rate needs both" in half.text
    r = c.post("/queues/limit/clear", data={"csrf": token, "key": "mail"}, follow_redirects=False)
    assert r.headers["location"].endswith("/queues?limit=cleared&key=mail")
    assert "the code&#39;s limit applies again" in c.get(r.headers["location"]).text
    mail = _limit(c, "mail")
    assert mail and mail["source"] == "code"


def test_a_new_key_from_the_page_is_shown_as_text(queue: errands.Queue) -> None:
    c = TestClient(create_app(queue))
    data = {"csrf": _csrf(c), "key": HOSTILE, "running": "1"}
    page = c.post("/queues/limit", data=data).text
    assert "<script>alert(1)" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert [x.key for x in queue.limits()] == [HOSTILE]


def test_limit_edits_are_refused_read_only_cross_origin_and_without_csrf(
    db_url: str, queue: errands.Queue
) -> None:
    queue.set_limit("mail", running=3)
    before = snapshot(db_url)
    ro = TestClient(create_app(queue, read_only=True))
    assert ro.post("/api/admin/limits/mail", json={"running": 9}).status_code == 403
    assert ro.post("/api/admin/limits/mail/clear", headers=JSON).status_code == 403
    assert "limit-set" not in ro.get("/queues").text  # no forms read-only
    c = TestClient(create_app(queue))
    evil = {**JSON, "origin": "https://evil.example"}
    assert c.post("/api/admin/limits/mail", json={"running": 9}, headers=evil).status_code == 403
    form = {"content-type": "application/x-www-form-urlencoded"}
    assert c.post("/api/admin/limits/mail/clear", headers=form).status_code == 403
    assert c.post("/queues/limit", data={"key": "mail", "running": "9"}).status_code == 403
    bad = {"csrf": "0" * 64, "key": "mail"}
    assert c.post("/queues/limit/clear", data=bad).status_code == 403
    assert snapshot(db_url) == before
    assert sql_rows(db_url, "SELECT running FROM flow_limits WHERE key = 'mail'") == [(3,)]
