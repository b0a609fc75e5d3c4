"""The job list's snoozed view (docs/dashboard.md, "/jobs"), on both backends: a queued job
whose latest attempt raised ``errands.Snooze``, found through the index of snoozed attempts
(migration 0019) rather than by reading the queued jobs, so a snooze behind ten thousand
newer queued jobs is still listed; an earlier snooze does not count once a later attempt
ended otherwise; pages and text search go on below the attempts looked at."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from starlette.testclient import TestClient

import errands
from errands.web import create_app
from errands.web.search import SCAN_ROWS

CALLS: Counter[str] = Counter()


def _listed(page: str) -> list[int]:
    return [int(i) for i in re.findall(r'<a href="[^"]*/jobs/(\d+)">', page)]


def _tasks(queue: errands.Queue) -> dict[str, errands.Task[Any, Any]]:
    CALLS.clear()

    @queue.task
    def later() -> None:  # snoozes for an hour each time
        raise errands.Snooze(3600)

    @queue.task
    def twice(n: int) -> None:  # snoozes to now, then for an hour: two snoozed attempts
        CALLS[f"twice{n}"] += 1
        raise errands.Snooze(0 if CALLS[f"twice{n}"] == 1 else 3600)

    @queue.task(max_attempts=5)
    def then_fails() -> None:  # snoozed once, then failed: queued to retry, not snoozed
        CALLS["then_fails"] += 1
        if CALLS["then_fails"] == 1:
            raise errands.Snooze(0)
        raise errands.JobError("APP:BROKEN", "again")

    @queue.task
    def then_succeeds() -> None:  # snoozed once, then done
        CALLS["then_succeeds"] += 1
        if CALLS["then_succeeds"] == 1:
            raise errands.Snooze(0)

    return {t.name: t for t in (later, twice, then_fails, then_succeeds)}


def test_only_a_latest_attempt_that_snoozed_counts(queue: errands.Queue) -> None:
    t = _tasks(queue)
    snoozed = t["later"].enqueue()
    fails = t["then_fails"].enqueue()
    succeeds = t["then_succeeds"].enqueue()
    two = t["twice"].enqueue(n=1)
    queue.run_worker(burst=True, handle_signals=False)
    assert [a.status for a in queue.attempts(fails)] == ["snoozed", "failed"]
    assert [a.status for a in queue.attempts(two)] == ["snoozed", "snoozed"]
    assert queue.get(succeeds).status == "succeeded"  # type: ignore[union-attr]
    c = TestClient(create_app(queue))
    assert _listed(c.get("/jobs?view=snoozed").text) == [two, snoozed]
    body = c.get("/api/admin/jobs?view=snoozed").json()
    assert [j["id"] for j in body["jobs"]] == [two, snoozed]
    # It looked at the five snoozed attempts (two of them the same job's), no more.
    assert body["scanned"] == 5 and body["scan_limit"] == SCAN_ROWS and not body["next_cursor"]
    page = c.get("/jobs?view=snoozed").text
    assert "2 snoozed job(s) among the 5 newest snoozed attempt(s) looked at" in page
    # The exact filters and text search narrow it; paging goes on below the last one shown.
    assert _listed(c.get("/jobs?view=snoozed&type=later").text) == [snoozed]
    assert _listed(c.get("/jobs?view=snoozed&q=twice").text) == [two]
    first = c.get("/api/admin/jobs?view=snoozed&limit=1").json()
    assert [j["id"] for j in first["jobs"]] == [two] and first["next_cursor"] == str(two)
    rest = c.get(f"/api/admin/jobs?view=snoozed&limit=1&cursor={two}").json()
    assert [j["id"] for j in rest["jobs"]] == [snoozed] and not rest["next_cursor"]


def test_a_snooze_behind_ten_thousand_newer_queued_jobs_is_listed(queue: errands.Queue) -> None:
    # The view no longer reads the newest 10,000 queued jobs looking for snoozes: it reads
    # the snoozed attempts, so one older than all of those is still on the first page.
    t = _tasks(queue)
    snoozed = t["later"].enqueue()
    queue.run_worker(burst=True, handle_signals=False)
    queue.enqueue_many([("later", {}) for _ in range(SCAN_ROWS + 1)])  # never run
    c = TestClient(create_app(queue))
    assert _listed(c.get("/jobs?view=snoozed").text) == [snoozed]
    body = c.get("/api/admin/jobs?view=snoozed").json()
    assert [j["id"] for j in body["jobs"]] == [snoozed] and body["scanned"] == 1
