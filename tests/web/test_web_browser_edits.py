"""Round three of the dashboard (issue #36) in a real browser (Debian's chromium, driven by
Playwright), on both backends: limits edited from the queues page, a batch's page and its
"retry failed members", and bulk actions by filter (delete, run now, priority) from the job
list through the confirmation page — each readable at 800 px without sideways scroll, in
light and dark.

ERRANDS_UPDATE_SCREENSHOTS=1 also saves these pages at 1366 and 800 px, light and dark,
under docs/screenshots/ (a normal run never changes tracked files).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import errands
from helpers.support import is_postgres
from helpers.web import launch_chromium, served

SHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
UPDATE = os.environ.get("ERRANDS_UPDATE_SCREENSHOTS") == "1"
LONG_KEY = "partner-api.eu-west-1.payments.example.com/v2/charges"


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    yield from launch_chromium()


def build(db_url: str) -> dict[str, Any]:
    """A batch of 12 (two fail), two limited tasks waiting in groups, jobs queued for later."""
    with errands.Queue(db_url, durability="normal") as q:

        @q.task(max_attempts=1)
        def render_page(n: int) -> None:
            if n in (4, 9):
                raise errands.JobError("RENDER:FONT_MISSING", f"page {n}: no font", retry=False)

        @q.task
        def assemble_report() -> None: ...

        with q.batch(on_complete=("assemble_report", {})) as b:
            for n in range(12):
                b.enqueue("render_page", {"n": n})
        q.run_worker(burst=True, concurrency=2, handle_signals=False)

        @q.task(limit=errands.Limit(LONG_KEY, running=4, group="tenant"))
        def charge(tenant: str) -> None: ...

        @q.task
        def send_email(n: int) -> None: ...

        for tenant in ("acme", "acme", "globex", "initech"):
            charge.enqueue(tenant=tenant)
        q.set_limit("mail", running=2, rate=(100, 60))
        later = [q.enqueue("send_email", {"n": i}, delay=3600) for i in range(3)]
        return {"batch": b.id, "members": b.ids, "later": later}


def _wide(page: Any) -> bool:
    return bool(page.evaluate("document.documentElement.scrollWidth > window.innerWidth"))


def _fits(chromium: Any, url: str) -> None:
    for scheme in ("light", "dark"):
        page = chromium.new_page(viewport={"width": 800, "height": 900})
        page.emulate_media(color_scheme=scheme)
        page.goto(url)
        assert not _wide(page), f"{url} scrolls sideways at 800 px ({scheme})"
        page.close()


def test_limits_are_edited_from_the_queues_page(db_url: str, chromium: Any) -> None:
    build(db_url)
    with served(db_url) as base:
        page = chromium.new_page(viewport={"width": 1366, "height": 900})
        page.goto(base + "queues")
        row = page.locator(f"tr[data-key='{LONG_KEY}']")
        assert "acme: 0 / 2" in row.inner_text() and "globex: 0 / 1" in row.inner_text()
        row.locator("input[name=running]").fill("1")
        row.locator("input[name=rate_n]").fill("30")
        row.locator("input[name=rate_seconds]").fill("60")
        with page.expect_navigation():
            row.locator("form.limit-set button").click()
        assert "stored" in page.inner_text("#limit-done")
        row = page.locator(f"tr[data-key='{LONG_KEY}']")
        assert "30 per 1 min" in row.inner_text() and "set (api" in row.inner_text()
        with page.expect_navigation():
            row.locator("form.limit-clear button").click()
        assert "the code's limit applies again" in page.inner_text("#limit-done")
        page.fill("form.limit-new input[name=key]", "pdf")
        page.fill("form.limit-new input[name=running]", "3")
        with page.expect_navigation():
            page.click("form.limit-new button")
        assert "3" in page.locator("tr[data-key='pdf'] td.num").inner_text()
        with errands.Queue(db_url) as q:
            found = {i.key: (i.source, i.running) for i in q.limits()}
        assert found["pdf"] == ("set", 3) and found[LONG_KEY][0] == "code"
        page.close()
        _fits(chromium, base + "queues")
        if UPDATE and not is_postgres(db_url):
            _shots(chromium, base + "queues", "queues-limits")


def test_the_batch_page_and_retry_failed_members(db_url: str, chromium: Any) -> None:
    world = build(db_url)
    with served(db_url) as base:
        page = chromium.new_page(viewport={"width": 1366, "height": 900})
        page.goto(base + f"jobs/{world['members'][0]}")
        with page.expect_navigation():
            page.click("a.batch-of")
        assert page.url.endswith(f"/batches/{world['batch']}")
        assert page.locator("svg.progress-chart polyline").count() == 1
        assert "12 of 12" in page.inner_text("h2 >> text=Members finished over time")
        if UPDATE and not is_postgres(db_url):
            _shots(chromium, page.url, "batch")
        with page.expect_navigation():
            page.click("#retry-failed")
        assert page.inner_text("#batch-retried").startswith("2 failed or cancelled member(s)")
        assert page.locator("#retry-failed").count() == 0
        page.close()
        _fits(chromium, base + f"batches/{world['batch']}")
        _fits(chromium, base + f"jobs/{world['batch']}")


def test_bulk_actions_by_filter_count_first_then_act(db_url: str, chromium: Any) -> None:
    world = build(db_url)
    with served(db_url) as base:
        page = chromium.new_page(viewport={"width": 1366, "height": 900})
        page.on("dialog", lambda dialog: dialog.accept())  # delete asks once more
        page.goto(base + "jobs?status=queued&type=send_email")
        with page.expect_navigation():
            page.click("a[data-bulk=priority]")
        assert page.inner_text("#bulk-count") == "3"
        if UPDATE and not is_postgres(db_url):
            _shots(chromium, page.url, "bulk-confirm")
        page.fill("input[name=priority]", "5")
        with page.expect_navigation():
            page.click("form button[type=submit] >> text=Yes")
        assert page.inner_text("#bulk-done").startswith("3 job(s) given the new priority (5)")
        page.goto(base + "jobs?status=queued&type=send_email")
        with page.expect_navigation():
            page.click("a[data-bulk=run_now]")
        with page.expect_navigation():
            page.click("form button[type=submit] >> text=Yes")
        assert page.inner_text("#bulk-done").startswith("3 job(s) made due now")
        page.goto(base + "jobs?status=failed")
        with page.expect_navigation():
            page.click("a[data-bulk=delete]")
        assert page.inner_text("#bulk-count") == "2"
        _fits(chromium, page.url)
        with page.expect_navigation():
            page.click("form button[type=submit] >> text=Yes")
        assert page.inner_text("#bulk-done").startswith("2 job(s) deleted")
        page.close()
    with errands.Queue(db_url) as q:
        now = time.time()
        for job_id in world["later"]:
            job = q.get(job_id)
            assert job and job.priority == 5 and job.run_at and job.run_at.timestamp() <= now
        assert q.jobs(status="failed") == []


def _shots(chromium: Any, url: str, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    for scheme in ("light", "dark"):
        for width in (1366, 800):
            page = chromium.new_page(viewport={"width": width, "height": 860})
            page.emulate_media(color_scheme=scheme)
            page.goto(url)
            page.screenshot(path=str(SHOTS / f"{name}-{width}-{scheme}.png"))
            page.close()
