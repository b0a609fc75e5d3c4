"""The JSON admin API (docs/dashboard.md) through Starlette's TestClient, on both backends."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

import errands
from errands.web import create_app
from errands.web.params import MAX_LIMIT
from helpers.ops import DAY, HOUR, run_job
from helpers.support import EPOCH, FixedClock
from helpers.web import populate

JSON = {"content-type": "application/json"}


@pytest.fixture
def world(queue: errands.Queue) -> Iterator[tuple[errands.Queue, TestClient, dict[str, Any]]]:
    ids = populate(queue)
    with TestClient(create_app(queue)) as client:
        yield queue, client, ids


def test_list_filters(world: Any) -> None:
    q, c, ids = world
    r = c.get("/api/admin/jobs", params={"status": "failed"})
    assert r.status_code == 200
    body = r.json()
    assert sorted(j["id"] for j in body["jobs"]) == sorted(ids["failed"])
    assert body["next_cursor"] is None
    assert {j["error_code"] for j in body["jobs"]} == {"PAY:DECLINED"}
    # every jobs column is a key, as `errands jobs --json`
    assert set(body["jobs"][0]) == set(q.get(ids["failed"][0]).to_dict())
    assert [j["id"] for j in c.get("/api/admin/jobs?queue=mail").json()["jobs"]] == sorted(
        ids["queued"], reverse=True
    )
    assert len(c.get("/api/admin/jobs?type=resize").json()["jobs"]) == 5
    assert len(c.get("/api/admin/jobs?error_code=PAY:DECLINED").json()["jobs"]) == 3
    assert c.get("/api/admin/jobs?type=nope").json() == {"jobs": [], "next_cursor": None}


def test_cursor_pagination_walks_every_job_once(world: Any) -> None:
    _, c, ids = world
    seen: list[int] = []
    cursor = None
    pages = 0
    while True:
        params: dict[str, Any] = {"limit": 3}
        if cursor:
            params["cursor"] = cursor
        body = c.get("/api/admin/jobs", params=params).json()
        seen += [j["id"] for j in body["jobs"]]
        pages += 1
        cursor = body["next_cursor"]
        if cursor is None:
            break
    everything = ids["ok"] + ids["failed"] + ids["queued"]
    assert seen == sorted(everything, reverse=True)
    assert pages == -(-len(everything) // 3)


def test_limit_is_capped_not_refused(world: Any) -> None:
    _, c, _ = world
    r = c.get("/api/admin/jobs", params={"limit": MAX_LIMIT * 10})
    assert r.status_code == 200
    assert len(r.json()["jobs"]) == 10


@pytest.mark.parametrize(
    "query",
    [
        "status=dead",
        "limit=0",
        "limit=-1",
        "limit=ten",
        "cursor=0",
        "cursor=abc",
        "cursor=99999999999999999999999",
        "type=" + "x" * 201,
        "queue=a%00b",
    ],
)
def test_bad_list_parameters_are_400_json(world: Any, query: str) -> None:
    _, c, _ = world
    r = c.get("/api/admin/jobs?" + query)
    assert r.status_code == 400
    assert r.headers["content-type"] == "application/json"
    assert r.json()["error"]


def test_job_detail_with_attempts_and_events(world: Any) -> None:
    q, c, ids = world
    job_id = ids["failed"][0]
    body = c.get(f"/api/admin/jobs/{job_id}").json()
    assert body["job"]["status"] == "failed"
    assert [a["attempt"] for a in body["attempts"]] == [1]
    assert body["attempts"][0]["has_traceback"] is True
    assert [e["event"] for e in body["events"]] == [e.event for e in q.events(job_id)]
    assert body["events"][-1]["event"] == "FAILED"


@pytest.mark.parametrize("path", ["/api/admin/jobs/{}", "/jobs/{}", "/jobs/{}/payload"])
def test_unknown_ids_are_404(world: Any, path: str) -> None:
    _, c, _ = world
    for bad in (987654, 0, 2**64):
        assert c.get(path.format(bad)).status_code == 404
    assert c.post("/api/admin/jobs/987654/retry", headers=JSON).status_code == 404


def test_retry_and_cancel_record_api_events(world: Any) -> None:
    q, c, ids = world
    failed, queued = ids["failed"][0], ids["queued"][0]
    r = c.post(f"/api/admin/jobs/{failed}/retry", headers=JSON)
    assert r.status_code == 200, r.text
    assert q.get(failed).status == "queued"
    assert (q.events(failed)[-1].event, q.events(failed)[-1].actor) == ("RETRIED", "api")
    r = c.post(f"/api/admin/jobs/{queued}/cancel", headers=JSON)
    assert r.json() == {"id": queued, "result": "cancelled"}
    assert (q.events(queued)[-1].event, q.events(queued)[-1].actor) == ("CANCELLED", "api")
    # a second cancel is a state conflict, not a server error
    r = c.post(f"/api/admin/jobs/{queued}/cancel", headers=JSON)
    assert r.status_code == 409 and "cancelled" in r.json()["error"]


def test_bulk_retry_of_a_filtered_set(world: Any) -> None:
    q, c, ids = world
    body = {"status": "failed", "type": "charge", "error_code": "PAY:DECLINED"}
    dry = c.post("/api/admin/jobs/retry", json={**body, "dry_run": True}).json()
    assert dry["selected"] == 3 and dry["changed"] == 0
    assert all(q.get(i).status == "failed" for i in ids["failed"])
    done = c.post("/api/admin/jobs/retry", json=body).json()
    assert done == {"selected": 3, "changed": 3, "requested": 0, "skipped": 0, "dry_run": False}
    assert all(q.events(i)[-1].actor == "api" for i in ids["failed"])
    r = c.post("/api/admin/jobs/cancel", json={"status": "queued", "queue": "mail"})
    assert r.json()["changed"] == 2
    assert c.post("/api/admin/jobs/retry", json={"status": "queued"}).status_code == 400
    assert c.post("/api/admin/jobs/retry", json=["failed"]).status_code == 400
    assert c.post("/api/admin/jobs/retry", content=b"{nope", headers=JSON).status_code == 400


def test_stats_errors_workers_periodic_metrics_healthz(world: Any) -> None:
    q, c, _ = world
    stats = c.get("/api/admin/stats").json()
    assert stats["counts"] == q.stats()["counts"]
    assert stats["counts"]["failed"] == 3
    errors = c.get("/api/admin/errors?top=1").json()
    assert errors["errors"][0]["error_code"] == "PAY:DECLINED"
    assert errors["errors"][0]["count"] == 3
    assert len(errors["errors"]) == 1
    assert c.get("/api/admin/errors?top=0").status_code == 400
    assert c.get("/api/admin/errors?since=forever").status_code == 400
    assert c.get("/api/admin/workers").json() == {"workers": q.workers()}
    assert c.get("/api/admin/periodic").json() == {"periodic": []}
    hours = c.get("/api/admin/throughput?hours=2").json()["hours"]
    assert sum(h["succeeded"] for h in hours) == 5 and sum(h["failed"] for h in hours) == 3
    metrics = c.get("/metrics")
    assert metrics.headers["content-type"].startswith("text/plain")
    assert 'errands_jobs_in_state{state="failed"} 3.0' in metrics.text
    assert c.get("/healthz").json() == {"status": "ok"}


def test_prune_through_the_api(db_url: str) -> None:
    with errands.Queue(db_url, clock=FixedClock(EPOCH)) as q:
        old = run_job(
            q, "x", run_at=EPOCH - 40 * DAY, started=EPOCH - 40 * DAY, finished=EPOCH - 40 * DAY
        )
        new = run_job(q, "x", run_at=EPOCH - HOUR, started=EPOCH - HOUR, finished=EPOCH - HOUR)
        c = TestClient(create_app(q))
        dry = c.post("/api/admin/prune", json={"dry_run": True}).json()
        assert dry["total"] == 1 and q.get(old) is not None
        assert c.post("/api/admin/prune", json={}).json()["total"] == 1
        assert q.get(old) is None and q.get(new) is not None


def test_throughput_counts_live_rows_and_the_rollup_of_pruned_ones(db_url: str) -> None:
    with errands.Queue(db_url, clock=FixedClock(EPOCH)) as q:
        run_job(
            q,
            "a",
            run_at=EPOCH - 2 * HOUR,
            started=EPOCH - 2 * HOUR,
            finished=EPOCH - 2 * HOUR + 60,
        )
        run_job(
            q,
            "b",
            run_at=EPOCH - HOUR,
            started=EPOCH - HOUR,
            finished=EPOCH - 1800,
            outcome="failed",
        )
        before = q.throughput(hours=3, now=EPOCH)
        assert [h["hour"] for h in before] == [EPOCH - 2 * HOUR, EPOCH - HOUR, EPOCH]
        assert [(h["succeeded"], h["failed"]) for h in before] == [(1, 0), (0, 1), (0, 0)]
        q.prune(now=EPOCH + 400 * DAY)  # past every retention: both rows rolled up, then deleted
        assert q.jobs() == []
        assert q.throughput(hours=3, now=EPOCH) == before
