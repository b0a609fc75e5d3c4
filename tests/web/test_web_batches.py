"""A batch's page and its JSON (issue #36), on both backends: members per state, the
callback's state, progress over time, "retry failed members" (guarded like every mutation),
the links from each member's and the callback's job page, and the callback's event that no
longer lists every member's id."""

from __future__ import annotations

import re
from typing import Any

import pytest
from starlette.testclient import TestClient

import errands
from errands.web import create_app
from helpers.support import get_job
from helpers.web import snapshot

JSON = {"content-type": "application/json"}
MEMBERS = 40


@pytest.fixture
def batch(queue: errands.Queue) -> dict[str, Any]:
    """Forty members, every seventh failing for good, then the callback; run by a worker."""

    @queue.task(max_attempts=1)
    def part(n: int) -> None:
        if n % 7 == 3:
            raise errands.JobError("APP:PART", f"part {n} broke", retry=False)

    @queue.task
    def summarize() -> None: ...

    with queue.batch(on_complete=("summarize", {})) as b:
        for n in range(MEMBERS):
            b.enqueue("part", {"n": n})
    queue.run_worker(burst=True, concurrency=2, handle_signals=False)
    failed = [i for n, i in enumerate(b.ids) if n % 7 == 3]
    return {"id": b.id, "ids": b.ids, "failed": failed}


def _csrf(c: TestClient, path: str) -> str:
    match = re.search(r'name="csrf" value="([0-9a-f]+)"', c.get(path).text)
    assert match, f"{path} has no CSRF field"
    return match.group(1)


def test_the_batch_page_shows_members_per_state_the_callback_and_progress(
    queue: errands.Queue, batch: dict[str, Any]
) -> None:
    c = TestClient(create_app(queue))
    page = c.get(f"/batches/{batch['id']}").text
    counts = dict(
        (state, int(n.replace(",", "")))
        for n, state in re.findall(
            r'<span class="n">([\d,]+)</span><span class="what">(\w+)</span>', page
        )
    )
    assert counts["succeeded"] == MEMBERS - len(batch["failed"])
    assert counts["failed"] == len(batch["failed"]) == 6
    callback = re.search(r'id="batch-callback">(.*?)</td>', page, re.S)
    assert callback and f"#{batch['id']}" in callback.group(1)
    assert "status-succeeded" in callback.group(1)
    assert f"{MEMBERS} of {MEMBERS}" in page  # the progress chart's heading
    assert 'class="chart progress-chart"' in page and "<polyline" in page
    # Members: failed first, each linked.
    rows = re.findall(r'<tr><td><a href="[^"]*/jobs/(\d+)">', page)
    assert [int(r) for r in rows[:6]] == batch["failed"] and len(rows) == MEMBERS
    assert 'id="retry-failed">Retry 6 failed member(s)' in page
    body = c.get(f"/api/admin/batches/{batch['id']}").json()
    assert body["total"] == MEMBERS and body["counts"]["failed"] == 6 and body["done"]
    assert body["callback"]["status"] == "succeeded"
    assert [m["id"] for m in body["members"]] == batch["ids"]


def test_retry_failed_members_from_the_page_and_the_api(
    queue: errands.Queue, batch: dict[str, Any]
) -> None:
    c = TestClient(create_app(queue), follow_redirects=False)
    token = _csrf(c, f"/batches/{batch['id']}")
    r = c.post(f"/batches/{batch['id']}/retry", data={"csrf": token})
    assert r.status_code == 303
    assert r.headers["location"].endswith(f"/batches/{batch['id']}?retried=6&skipped=0")
    page = c.get(r.headers["location"]).text
    assert re.search(r'id="batch-retried">6 failed or cancelled member\(s\) retried\.', page)
    assert all(get_job(queue, i).status == "queued" for i in batch["failed"])
    assert queue.events(batch["failed"][0])[-1].actor == "api"
    assert "retry-failed" not in page  # none left to retry
    again = c.post(f"/api/admin/batches/{batch['id']}/retry", headers=JSON).json()
    assert again == {"id": batch["id"], "retried": 0, "skipped": 0, "refused": {}}


def test_retry_failed_members_is_guarded(
    db_url: str, queue: errands.Queue, batch: dict[str, Any]
) -> None:
    before = snapshot(db_url)
    c = TestClient(create_app(queue))
    assert c.post(f"/batches/{batch['id']}/retry", data={"csrf": "0" * 64}).status_code == 403
    assert c.post(f"/api/admin/batches/{batch['id']}/retry").status_code == 403  # not JSON
    ro = TestClient(create_app(queue, read_only=True))
    assert ro.post(f"/api/admin/batches/{batch['id']}/retry", headers=JSON).status_code == 403
    assert "retry-failed" not in ro.get(f"/batches/{batch['id']}").text
    assert snapshot(db_url) == before


def test_job_pages_link_to_the_batch_and_the_callback_event_is_short(
    queue: errands.Queue, batch: dict[str, Any]
) -> None:
    c = TestClient(create_app(queue))
    member = c.get(f"/jobs/{batch['ids'][0]}").text
    assert re.search(rf'href="[^"]*/batches/{batch["id"]}" class="batch-of">its batch<', member)
    callback = c.get(f"/jobs/{batch['id']}").text
    assert re.search(rf'id="batch-link"><a href="[^"]*/batches/{batch["id"]}">', callback)
    waiting = re.search(
        r'<td class="event">WAITING</td>.*?<td class="detail">([^<]*)</td>', callback
    )
    assert waiting and waiting.group(1).startswith(f"after {MEMBERS} jobs: ")
    assert f", {batch['ids'][-1]}" not in waiting.group(1)  # the first five, not all forty
    assert "and 20 more" in callback  # the upstream list is cut too


def test_a_job_that_runs_after_nothing_has_no_batch_page(queue: errands.Queue) -> None:
    job_id = queue.enqueue("lonely", {})
    c = TestClient(create_app(queue))
    r = c.get(f"/batches/{job_id}")
    assert r.status_code == 404 and "is no batch" in r.text
    assert c.get("/api/admin/batches/99999").status_code == 404
