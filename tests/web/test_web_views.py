"""The dashboard's search, its views per situation, the queues page, a job's story and the
latency charts — on both backends, through Starlette's TestClient, with an XSS vector in every
new field they show."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from starlette.testclient import TestClient

import errands
from errands import reports
from errands.web import create_app, search
from helpers.ops import claim, enqueue, register_worker, run_job

XSS = '<script>alert("x")</script><img src=x onerror=alert(1)>'


def ids_in(html: str) -> list[int]:
    match = re.search(r'<div id="live">(.*)</div>', html, re.S)
    assert match
    return [int(n) for n in re.findall(r'href="[^"]*/jobs/(\d+)"', match.group(1))]


@pytest.fixture
def world(queue: errands.Queue) -> dict[str, Any]:
    """A job of each situation, at the real time the dashboard reads."""
    q = queue
    now = time.time()
    out: dict[str, Any] = {"q": q}
    out["scheduled"] = enqueue(q, "remind", at=now, run_at=now + 3600, queue="mail")
    out["due"] = enqueue(q, "remind", at=now - 30, run_at=now - 20, queue="mail")
    # retrying: one attempt failed, the next one due in a minute
    out["retrying"] = run_job(
        q, "charge", run_at=now - 100, started=now - 90, finished=None, outcome="running"
    )
    from errands.backends.base import Retried

    fail = Retried(
        out["retrying"], 1, now - 90, "PAY:DECLINED", "card 4242 declined", "tb", now + 60, 0.0
    )
    assert q.backend.finish([fail], "w1", now - 80) == [True]
    out["running"] = run_job(
        q,
        "resize",
        run_at=now - 50,
        started=now - 40,
        finished=None,
        outcome="running",
        worker="web-1.17",
    )
    register_worker(q, "web-1.17", at=now, types=["resize"])
    out["dead"] = run_job(
        q,
        "export",
        run_at=now - 300,
        started=now - 290,
        finished=now - 200,
        outcome="failed",
        error_code="INTERNAL:ValueError",
    )
    out["payload"] = q.enqueue("note", {"text": "the quick brown fox"}, delay=7200)
    return out


def test_views_list_each_situation_with_its_columns(world: dict[str, Any]) -> None:
    q = world["q"]
    c = TestClient(create_app(q))
    scheduled = c.get("/jobs", params={"view": "scheduled"}).text
    assert set(ids_in(scheduled)) == {world["scheduled"], world["payload"]}
    assert "in 59 min" in scheduled or "in 1 h" in scheduled
    retrying = c.get("/jobs", params={"view": "retrying"}).text
    assert ids_in(retrying) == [world["retrying"]]
    assert "attempts left" in retrying and "4 of 5" in retrying and "PAY:" in retrying
    running = c.get("/jobs", params={"view": "running"}).text.replace("<wbr>", "")
    assert ids_in(running) == [world["running"]] and "web-1.17" in running
    assert 'id="list-total">1 job(s) match' in running  # a total where the counts say it
    dead = c.get("/jobs", params={"view": "dead"}).text
    assert ids_in(dead) == [world["dead"]] and 'id="list-total">1 job(s) match' in dead
    bulk = re.search(r'class="button" href="([^"]+)"', dead)
    assert bulk and "status=failed" in bulk.group(1)
    confirm = c.get(bulk.group(1).replace("&amp;", "&").replace("http://testserver", ""))
    assert re.search(r'id="bulk-count">1<', confirm.text)
    # The JSON twin takes the same parameters and answers the same jobs.
    for view in search.VIEWS:
        page = ids_in(c.get("/jobs", params={"view": view}).text)
        api = c.get("/api/admin/jobs", params={"view": view}).json()
        assert [j["id"] for j in api["jobs"]] == page, view
    assert c.get("/jobs", params={"view": "zombie"}).status_code == 400
    assert c.get("/api/admin/jobs", params={"view": "dead", "status": "queued"}).status_code == 400


def test_workers_page_shows_the_jobs_each_worker_holds(world: dict[str, Any]) -> None:
    c = TestClient(create_app(world["q"]))
    page = c.get("/workers").text.replace("<wbr>", "")  # names may wrap after separators
    assert "web-1.17" in page and f"/jobs/{world['running']}" in page
    assert "1 / 4" in page  # running / concurrency


def test_search_by_id_prefix_message_and_payload(world: dict[str, Any]) -> None:
    q = world["q"]
    c = TestClient(create_app(q), follow_redirects=False)
    r = c.get("/find", params={"q": f"#{world['dead']}"})
    assert r.status_code == 303 and r.headers["location"].endswith(f"/jobs/{world['dead']}")
    assert (
        c.get("/find", params={"q": str(world["dead"])})
        .headers["location"]
        .endswith(f"/jobs/{world['dead']}")
    )
    assert c.get("/find", params={"q": "fox"}).headers["location"].endswith("/jobs?q=fox")

    def found(text: str) -> list[int]:
        page = ids_in(c.get("/jobs", params={"q": text}).text)
        api = [j["id"] for j in c.get("/api/admin/jobs", params={"q": text}).json()["jobs"]]
        assert page == api, text
        return page

    assert found("INTERNAL:") == [world["dead"]]  # error code prefix
    assert found("internal") == [world["dead"]]  # case-insensitive
    assert found("exp") == [world["dead"]]  # type prefix
    assert sorted(found("mail")) == sorted([world["scheduled"], world["due"]])  # queue prefix
    assert found("4242") == [world["retrying"]]  # error message text
    assert found("quick brown") == [world["payload"]]  # payload text
    assert found("ValueError") == []  # not a prefix, not in a message
    assert found("%") == [] and found("_") == [] and found("\\") == []  # literal, not wildcards
    body = c.get("/api/admin/jobs", params={"q": "fox"}).json()
    assert body["scanned"] == 6 and body["scan_limit"] == search.SCAN_ROWS == 10_000
    assert "among the 6 job id(s) searched" in c.get("/jobs", params={"q": "fox"}).text


def test_a_search_reads_at_most_the_scan_limit_and_goes_on_from_there(
    queue: errands.Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = [queue.enqueue("note", {"n": i, "tag": "needle" if i % 2 else "hay"}) for i in range(30)]
    monkeypatch.setattr(search, "SCAN_ROWS", 10)
    monkeypatch.setattr(search, "BATCH", 4)
    c = TestClient(create_app(queue))
    seen: list[int] = []
    cursor: str | None = None
    scans = 0
    while True:
        query: dict[str, Any] = {"q": "needle", "limit": 50}
        if cursor:
            query["cursor"] = cursor
        body = c.get("/api/admin/jobs", params=query).json()
        assert body["scanned"] <= 10
        scans += 1
        seen += [j["id"] for j in body["jobs"]]
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert seen == sorted(ids[1::2], reverse=True) and scans == 3  # ids 21-30, 11-20, 1-10


def test_queues_page(world: dict[str, Any]) -> None:
    c = TestClient(create_app(world["q"]))
    page = c.get("/queues").text
    mail = re.search(r"<tr>\s*<td class=\"id\"><a [^>]*>mail</a>(.*?)</tr>", page, re.S)
    assert mail, page
    cells = re.findall(r"<td[^>]*>(.*?)</td>", mail.group(1), re.S)
    text = [re.sub(r"<[^>]+>", "", x).strip() for x in cells]
    assert text[0] == "2" and text[1] == "1"  # queued, due
    assert re.fullmatch(r"\d+ s", text[2]), text  # the due one has waited ~20 s
    assert world["q"].backend.oldest_due_by_queue(time.time())["mail"]["due"] == 1


def test_job_story_and_commands(world: dict[str, Any]) -> None:
    c = TestClient(create_app(world["q"]))
    page = c.get(f"/jobs/{world['retrying']}").text
    story = re.search(r'<ol class="story">(.*?)</ol>', page, re.S)
    assert story
    steps = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", story.group(1)))
    assert re.search(r"waited \d+ s attempt 1 failed started .* UTC .* on w1, ran 10 s", steps)
    assert "next attempt" in steps and "card 4242 declined" in steps
    assert "errands show" in page and f"errands show {world['retrying']}" in page
    dead = c.get(f"/jobs/{world['dead']}").text
    assert f"errands retry {world['dead']}" in dead and "errands cancel" not in dead


def test_latency_per_hour_from_the_minute_figures(queue: errands.Queue) -> None:
    now = time.time()
    hour = now - now % 3600
    # Two hours back: waits of 2 s and 30 s; runs of 1 s.
    for wait in (2.0, 30.0):
        run_job(
            queue,
            "report",
            run_at=hour - 7200,
            started=hour - 7200 + wait,
            finished=hour - 7200 + wait + 1,
        )
    series = reports.hourly_latency(queue.backend, now, 24)
    assert len(series) == 24
    point = next(h for h in series if h["hour"] == hour - 7200)
    assert point["wait_count"] == 2 and point["run_count"] == 2
    assert 2.0 <= point["wait_p50"] <= 2.5 and 30.0 <= point["wait_p95"] <= 30.0001
    assert 1.0 <= point["run_p95"] <= 1.0001
    assert sum(1 for h in series if h["wait_p50"] is not None) == 1
    c = TestClient(create_app(queue))
    for window in ("24h", "7d"):
        page = c.get("/", params={"window": window}).text
        assert page.count('class="p95-line"') == 2, window
    assert c.get("/", params={"window": "1y"}).status_code == 400


def test_new_fields_and_views_escape_what_they_show(queue: errands.Queue) -> None:
    now = time.time()
    run_job(
        queue,
        XSS,
        run_at=now - 60,
        started=now - 50,
        finished=now - 40,
        outcome="failed",
        error_code=f"{XSS}:{XSS}",
        queue=XSS,
        worker=XSS,
    )
    held = enqueue(queue, XSS, at=now - 2, run_at=now - 1, queue=XSS)
    assert claim(queue, XSS, at=now, worker=XSS).id == held
    jid = enqueue(queue, XSS, at=now, run_at=now + 600, queue=XSS)
    register_worker(queue, XSS, at=now, types=[XSS], queues=[XSS])
    c = TestClient(create_app(queue))
    pages = [
        "/queues",
        "/workers",
        f"/jobs/{jid}",
        f"/jobs/{held}",
        f"/jobs/{held - 1}",
        "/failures",
        "/",
        *(f"/jobs?view={v}" for v in search.VIEWS),
        f"/jobs?q={XSS}",
        f"/jobs?q=<script&type={XSS}",
    ]
    for path in pages:
        r = c.get(path)
        assert r.status_code == 200, path
        assert "<script>alert" not in r.text and "<img src=x" not in r.text, path
    assert "&lt;script&gt;" in c.get("/queues").text
    assert "&lt;script&gt;" in c.get("/workers").text


def _csrf(c: TestClient, path: str) -> str:
    match = re.search(r'name="csrf" value="([0-9a-f]+)"', c.get(path).text)
    assert match, "no CSRF field"
    return match.group(1)


def test_act_on_the_selected_rows(db_url: str, queue: errands.Queue) -> None:
    from helpers.web import populate, snapshot

    ids = populate(queue)
    c = TestClient(create_app(queue), follow_redirects=False)
    page = c.get("/jobs", params={"status": "failed"}).text
    assert page.count('type="checkbox" name="id"') == 3
    token = _csrf(c, "/jobs?status=failed")
    picked = [*ids["failed"][:2], ids["ok"][0]]  # a succeeded job cannot be retried: skipped
    body = [("csrf", token), ("action", "retry"), ("back", "/jobs?status=failed")]
    body += [("id", str(i)) for i in picked]
    form = {"content-type": "application/x-www-form-urlencoded"}

    def post(client: TestClient, extra: dict[str, str] | None = None) -> Any:
        raw = "&".join(f"{k}={v}" for k, v in body).replace("?", "%3F").replace("/", "%2F")
        return client.post("/jobs/act", content=raw, headers={**form, **(extra or {})})

    # Refused, with every row unchanged: another origin, no token, read-only mode.
    before = snapshot(db_url)
    assert post(c, {"origin": "https://evil.example"}).status_code == 403
    assert post(c, {"origin": "null"}).status_code == 403
    assert post(TestClient(create_app(queue))).status_code == 403  # another session's token
    read_only = TestClient(create_app(queue, read_only=True))
    assert 'type="checkbox"' not in read_only.get("/jobs").text
    assert post(read_only).status_code == 403
    assert snapshot(db_url) == before
    r = post(c)
    assert r.status_code == 303
    assert r.headers["location"].startswith("/jobs?status=failed&acted=retry&changed=2")
    assert "skipped=1" in r.headers["location"]
    assert [queue.get(i).status for i in picked] == ["queued", "queued", "succeeded"]  # type: ignore[union-attr]
    shown = c.get(r.headers["location"]).text
    assert 'id="acted">2 job(s) retried, 1 skipped' in shown
    # Bad selections are 400 with a styled page; nothing changes.
    before = snapshot(db_url)
    for bad in ("id=abc", "id=0", "", f"id={2**64}"):
        raw = f"csrf={token}&action=retry&{bad}"
        assert c.post("/jobs/act", content=raw, headers=form).status_code == 400, bad
    raw = f"csrf={token}&action=explode&id={ids['failed'][2]}"
    assert c.post("/jobs/act", content=raw, headers=form).status_code == 400
    assert snapshot(db_url) == before


def test_run_a_periodic_schedule_now(db_url: str, queue: errands.Queue) -> None:
    from helpers.web import snapshot

    @queue.periodic(every=3600, name=XSS, queue="reports", payload={"scope": "all"})
    def report(scope: str) -> None: ...

    next_run = queue.backend.list_periodic()[0].next_run_at
    c = TestClient(create_app(queue), follow_redirects=False)
    page = c.get("/periodic").text
    assert "<script>alert" not in page and "Run now" in page
    token = _csrf(c, "/periodic")
    form = {"csrf": token, "name": XSS}
    before = snapshot(db_url)
    assert (
        c.post("/periodic/run", data=form, headers={"origin": "https://evil.example"}).status_code
        == 403
    )
    assert c.post("/periodic/run", data={"name": XSS}).status_code == 403  # no CSRF token
    read_only = TestClient(create_app(queue, read_only=True))
    assert "Run now" not in read_only.get("/periodic").text
    assert read_only.post("/periodic/run", data=form).status_code == 403
    assert snapshot(db_url) == before
    r = c.post("/periodic/run", data=form)
    assert r.status_code == 303
    (job,) = queue.jobs()
    assert (job.type, job.queue, job.payload, job.status) == (
        XSS,
        "reports",
        {"scope": "all"},
        "queued",
    )
    assert r.headers["location"].endswith(f"/periodic?ran={job.id}")
    assert (
        f'id="ran">Enqueued <a href="http://testserver/jobs/{job.id}"'
        in c.get("/periodic", params={"ran": job.id}).text
    )
    assert queue.backend.list_periodic()[0].next_run_at == next_run  # its own tick unchanged
    missing = c.post("/periodic/run", data={"csrf": token, "name": "nope"})
    assert missing.status_code == 404 and "no periodic schedule named" in missing.text


def test_running_jobs_come_from_their_index_and_page(queue: errands.Queue) -> None:
    now = time.time()
    ids = [enqueue(queue, "resize", at=now - 5, run_at=now - 5) for _ in range(3)]
    for _ in ids:
        claim(queue, "resize", at=now, worker="w-9")
    queue.enqueue("resize", {}, delay=60)  # queued: never listed as running
    c = TestClient(create_app(queue))
    first = c.get("/api/admin/jobs", params={"status": "running", "limit": 2}).json()
    assert [j["id"] for j in first["jobs"]] == ids[:0:-1]
    rest = c.get(
        "/api/admin/jobs", params={"view": "running", "limit": 2, "cursor": first["next_cursor"]}
    ).json()
    assert [j["id"] for j in rest["jobs"]] == ids[:1] and rest["next_cursor"] is None
    page = c.get("/workers").text
    assert all(f"/jobs/{i}" in page for i in ids)  # held by w-9, which is not live: listed too


def test_every_page_links_its_json_twin(queue: errands.Queue) -> None:
    from helpers.web import populate

    populate(queue)
    c = TestClient(create_app(queue))
    pages = {
        "/?window=7d": ("/api/admin/charts?window=7d", "/api/admin/stats?window=7d"),
        "/?window=24h&type=resize": ("/api/admin/charts?window=24h&type=resize",),
        "/jobs?status=failed&type=charge": ("/api/admin/jobs?status=failed&type=charge&limit=50",),
        "/jobs?view=retrying&q=x": ("/api/admin/jobs?q=x&view=retrying&limit=50",),
        "/failures?window=1h": ("/api/admin/errors?window=1h&page=1",),
        "/workers": ("/api/admin/workers",),
        "/periodic": ("/api/admin/periodic",),
    }
    for page, twins in pages.items():
        html = c.get(page).text
        links = [u.replace("&amp;", "&") for u in re.findall(r'class="api" href="([^"]+)"', html)]
        for twin in twins:
            assert f"http://testserver{twin}" in links, (page, links)
            assert c.get(twin).status_code == 200, twin


def test_the_week_is_recomputed_at_most_once_a_minute(queue: errands.Queue) -> None:
    from errands.web import boards

    now = time.time()
    run_job(queue, "report", run_at=now - 30, started=now - 20, finished=now - 10)
    app = create_app(queue)
    c = TestClient(app)

    def finished(window: str) -> str:
        match = re.search(
            r"last " + window + r" · ([\d,]+) jobs", c.get("/", params={"window": window}).text
        )
        assert match
        return match.group(1)

    assert finished("7d") == "1"
    run_job(queue, "report", run_at=now - 9, started=now - 8, finished=now - 7)
    assert finished("24h") == "2"  # the day is read afresh on every refresh
    assert finished("7d") == "1"  # the week is kept for WEEK_TTL seconds
    app.state.dashboard._cache.clear()  # as when WEEK_TTL has passed
    assert finished("7d") == "2"
    assert boards.WEEK_TTL == 60.0


def test_pause_and_resume_a_queue_from_its_page(db_url: str, queue: errands.Queue) -> None:
    from helpers.web import snapshot

    queue.enqueue(XSS, {}, queue=XSS)
    c = TestClient(create_app(queue), follow_redirects=False)
    token = _csrf(c, "/queues")
    form = {"csrf": token, "name": XSS, "reason": XSS}
    before = snapshot(db_url)  # holds queue_pauses too
    evil = {"origin": "https://evil.example"}
    assert c.post("/queues/pause", data=form, headers=evil).status_code == 403
    assert c.post("/queues/pause", data={"name": XSS}).status_code == 403  # no CSRF token
    read_only = TestClient(create_app(queue, read_only=True))
    assert ">Pause</button>" not in read_only.get("/queues").text
    assert read_only.post("/queues/pause", data=form).status_code == 403
    assert snapshot(db_url) == before and not any(i.paused for i in queue.queues())
    r = c.post("/queues/pause", data=form)
    assert r.status_code == 303 and r.headers["location"].endswith("/queues")
    (info,) = [i for i in queue.queues() if i.name == XSS]
    assert info.paused and info.reason == XSS and info.paused_by == "api"
    page = c.get("/queues").text
    assert '<span class="badge bad">paused</span>' in page and ">Resume</button>" in page
    assert "<script>alert" not in page and "<img src=x" not in page
    before = snapshot(db_url)
    assert c.post("/queues/resume", data={"name": XSS}, headers=evil).status_code == 403
    assert snapshot(db_url) == before
    assert c.post("/queues/resume", data={"csrf": token, "name": XSS}).status_code == 303
    assert not any(i.paused for i in queue.queues())


def test_queues_page_shows_limits(queue: errands.Queue) -> None:
    queue.set_limit(XSS, running=4)
    page = TestClient(create_app(queue)).get("/queues").text
    assert '<table class="limits">' in page and "<script>alert" not in page
    assert re.search(r'<td class="num">4</td>', page)


def test_progress_shows_on_the_job_and_the_running_view(queue: errands.Queue) -> None:
    now = time.time()
    job_id = enqueue(queue, "resize", at=now - 5, run_at=now - 5)
    held = claim(queue, "resize", at=now, worker="w-7")
    assert queue.backend.record_progress("w-7", job_id, held.attempt, 0.4, XSS, now)
    c = TestClient(create_app(queue))
    for page in (f"/jobs/{job_id}", "/jobs?view=running"):
        html = c.get(page).text
        assert '<progress max="1" value="0.4">40%</progress> 40%' in html, page
        assert "&lt;script&gt;" in html and "<script>alert" not in html, page
