"""The dashboard in a real browser: Debian's chromium driven by Playwright for Python, against
``errands dashboard`` run as a subprocess on a free loopback port.

Playwright's own browser download cannot work offline, so the system chromium is launched by
path (``.ci/run`` installs it). With CI=true a missing chromium or Playwright fails the test;
elsewhere it skips.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import errands
from helpers.ops import HOUR, register_worker, run_job
from helpers.support import get_job, is_postgres
from helpers.web import launch_chromium, served

# The overview screenshot the docs show is refreshed only on request (a test run must not
# change tracked files):
#   ERRANDS_UPDATE_SCREENSHOT=1 make unit PYTEST_ARGS=tests/web/test_web_browser.py
SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "dashboard.png"
UPDATE_SCREENSHOT = os.environ.get("ERRANDS_UPDATE_SCREENSHOT") == "1"
# Each vector would set window.__xss if it ever ran.
XSS = '<script>window.__xss=1</script><img src=x onerror="window.__xss=2">'
XSS_CODE = "XSS:VECTOR"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    yield from launch_chromium()


@pytest.fixture
def dashboard(db_url: str) -> Iterator[str]:
    with served(db_url) as base:
        yield base


def build(db_url: str) -> dict[str, Any]:
    """History for the charts (24 h of finished jobs), a failed job to retry, and jobs whose
    type, queue, payload and error text carry XSS vectors."""
    q = errands.Queue(db_url, durability="normal")
    now = time.time()
    for h in range(24, 0, -1):
        for i in range(1 + (h * 7) % 3):
            at = now - h * HOUR + i * 60
            outcome = "failed" if (h + i) % 6 == 0 else "succeeded"
            run_job(
                q,
                f"report_{i % 3}",
                run_at=at,
                started=at + 1,
                finished=at + 3,
                outcome=outcome,
                error_code="UPSTREAM:TIMEOUT",
            )
    register_worker(q, "web-1.4711", at=now, types=["charge", "resize"], queues=None)

    @q.task(max_attempts=1)
    def charge(order: int, ctx: errands.JobContext) -> str:
        if ctx.attempt == 1:
            raise errands.JobError("PAYMENT:DECLINED", f"order {order}: card declined")
        return "charged"

    @q.task(name=XSS, queue=XSS, max_attempts=1)
    def evil(note: str, **extra: Any) -> None:
        raise ValueError(XSS)

    @q.task(max_attempts=1)
    def resize(n: int) -> dict[str, int]:
        return {"n": n}

    for n in range(12):
        resize.enqueue(n=n)
    failed = charge.enqueue(order=1042)
    xss = q.enqueue(XSS, {"note": XSS, XSS: [XSS]})
    q.run_worker(burst=True, concurrency=4, handle_signals=False)
    assert get_job(q, failed).status == "failed" and get_job(q, xss).status == "failed"
    return {"q": q, "failed": failed, "xss": xss}


def test_dashboard_in_a_browser(db_url: str, browser: Any) -> None:
    world = build(db_url)
    q: errands.Queue = world["q"]
    try:
        _scenario(db_url, browser, world, q)
    finally:
        q.close()


def _scenario(db_url: str, browser: Any, world: dict[str, Any], q: errands.Queue) -> None:
    from playwright.sync_api import expect  # importable: the browser fixture checked

    with _served(db_url) as base:
        page = browser.new_page(viewport={"width": 1360, "height": 1000})
        dialogs: list[str] = []
        errors: list[str] = []

        def dismiss(dialog: Any) -> None:
            dialogs.append(dialog.message)
            dialog.dismiss()

        page.on("dialog", dismiss)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        missing: list[str] = []
        page.on("response", lambda r: missing.append(r.url) if r.status == 404 else None)

        # Overview with its server-drawn charts.
        page.goto(base)
        assert page.locator("svg.chart").count() == 5  # + wait and run p50/p95 per hour
        assert page.locator("svg.latency polyline.p95-line").count() == 2
        assert page.locator("svg.chart rect.bar-succeeded").count() >= 20
        assert page.locator("svg.chart rect.bar-failed").count() >= 1
        assert page.locator(".card-failed .n").inner_text() == str(q.stats()["counts"]["failed"])
        if UPDATE_SCREENSHOT and not is_postgres(db_url):
            page.screenshot(path=str(SCREENSHOT), full_page=True)

        # Live: a job enqueued now shows up without a reload (the page refetches every 5 s).
        assert page.locator(".card-queued .n").inner_text() == "0"
        q.enqueue("resize", {"n": 99}, delay=3600)
        # (not wait_for_function: its string is eval'd, which the page's CSP forbids)
        expect(page.locator(".card-queued .n")).to_have_text("1", timeout=20_000)
        assert page.locator("#live-status").inner_text().startswith("live: updated")

        # Filtering the list.
        page.goto(base + "jobs")
        page.select_option("select[name=status]", "failed")
        page.fill("input[name=type]", "charge")
        page.click("form.filters button[type=submit]")
        page.wait_for_url("**/jobs?*status=failed*")
        rows = page.locator("table.jobs tr td:first-child a")
        assert rows.all_inner_texts() == [f"#{world['failed']}"]

        # Retry from the job page; a worker then runs it again.
        rows.first.click()
        page.click("button[value=retry]")
        page.wait_for_load_state()
        assert page.locator("h1 .status").inner_text() == "queued", page.content()[:3000]
        assert q.events(world["failed"])[-1].actor == "api"
        q.run_worker(burst=True, concurrency=1, handle_signals=False)
        page.reload()
        assert page.locator("h1 .status").inner_text() == "succeeded"
        assert get_job(q, world["failed"]).attempts == 2

        # Every view that shows the XSS job: nothing runs, the text is shown as text.
        xss = world["xss"]
        views = [
            "",
            "jobs",
            "jobs?status=failed",
            f"jobs/{xss}",
            f"jobs/{xss}/attempts/1/traceback",
            "failures",
            "failures?window=1h",
            "periodic",
            "workers",
            "queues",
            "jobs?view=dead",
            "jobs?view=running",
            f"jobs?q={XSS}",
            "?window=7d",
        ]
        for view in views:
            page.goto(base + view)
            assert page.evaluate("window.__xss === undefined"), view
        page.goto(base + f"jobs/{xss}")
        assert XSS in page.locator("h1 .type").inner_text()
        assert json.dumps(XSS)[1:-1] in page.locator("pre.payload").inner_text()
        assert XSS in page.locator("pre.error-detail").inner_text()
        page.goto(base + "failures")
        page.locator("a", has_text="retry failed…").last.click()
        assert page.evaluate("window.__xss === undefined")
        # The plain-text traceback page has no <link rel=icon>, so the browser asks for
        # /favicon.ico; that 404 (and its console line) is the only one allowed.
        assert {u.rsplit("/", 1)[-1] for u in missing} <= {"favicon.ico"}, missing
        errors = [e for e in errors if not e.startswith("Failed to load resource")]
        assert dialogs == [] and errors == [], (dialogs, errors)
        page.close()


class _served:
    """``errands dashboard`` as a subprocess for the length of a ``with`` block."""

    def __init__(self, db_url: str) -> None:
        self.db_url = db_url
        self.gen: Iterator[str] | None = None

    def __enter__(self) -> str:
        self.gen = dashboard.__wrapped__(self.db_url)  # type: ignore[attr-defined]
        return next(self.gen)

    def __exit__(self, *exc: object) -> None:
        assert self.gen is not None
        for _ in self.gen:
            pass
