"""The operator's dashboard in a real browser (Debian's chromium, driven by Playwright), on
both backends: the layout at 800 px (no sideways scroll, chart text at its size, error codes
whole), a tab whose session ended says so, login returns to the page asked for, ticked rows
are acted on once (a reload sends nothing), and dark mode follows the system.

ERRANDS_UPDATE_SCREENSHOTS=1 also saves each page at 1366 and 800 px, light and dark, under
docs/screenshots/ (a normal run never changes tracked files).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import errands
from errands.backends.base import ClaimRequest, Failed, Retried
from errands.fair import fair_specs
from errands.order import order_specs
from errands.tasks import declared_rows
from helpers.ops import HOUR, register_worker, run_job
from helpers.support import is_postgres
from helpers.web import launch_chromium, served

TOKEN = "browser-token-1234"
SHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
UPDATE = os.environ.get("ERRANDS_UPDATE_SCREENSHOTS") == "1"
LONG_WORKER = "worker-on-a-host-with-a-rather-long-name.eu-west-1.compute.internal.48213"
LONG_CODE = "INTERNAL:ConnectionRefusedErrorFromTheUpstreamPaymentGateway"
TENANTS = (
    "acme",
    "globex-corporation-holdings-international-eu-west-1-production",
    "initech",
    "umbrella_pharmaceuticals_research_division_7",
    "x" * 90,
)
LONG_ACCOUNT = "account-7f3e9a1c-5b2d-4e8f-9a6b-3c1d2e4f5a6b-settlement-eur"


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """The system chromium, or a skip saying why."""
    yield from launch_chromium()


def build(db_url: str) -> dict[str, Any]:
    """A day of history, failures with long codes and types, a worker and schedules with long
    names: what makes a narrow page scroll sideways if anything does."""
    q = errands.Queue(db_url, durability="normal")
    now = time.time()
    failed: list[int] = []
    for h in range(24, 0, -1):
        for i in range(1 + h % 3):
            at = now - h * HOUR + i * 60
            bad = (h + i) % 5 == 0
            job = run_job(
                q,
                "reconcile_customer_invoices_for_the_previous_billing_period" if bad else "resize",
                run_at=at,
                started=at + 2 + i,
                finished=at + 3 + 2 * i,
                outcome="failed" if bad else "succeeded",
                error_code=LONG_CODE,
                worker=LONG_WORKER,
            )
            if bad:
                failed.append(job)
    register_worker(q, LONG_WORKER, at=now, types=["resize", "reconcile", "send_email"])
    running = run_job(
        q,
        "resize",
        run_at=now - 30,
        started=now - 20,
        finished=None,
        outcome="running",
        worker=LONG_WORKER,
    )

    retrying = run_job(
        q, "send_email", run_at=now - 200, started=now - 190, finished=None, outcome="running"
    )
    again = Retried(
        retrying, 1, now - 190, "SMTP:UNAVAILABLE", "421 try later", "tb", now + 300, 0.0
    )
    assert q.backend.finish([again], "w1", now - 185) == [True]

    @q.periodic(every=300, name="nightly_reconciliation_of_customer_invoices_eu_west_1")
    def nightly() -> None: ...

    @q.periodic(cron="15 3 * * 1-5", name="weekday_export_of_the_warehouse_snapshot_to_s3")
    def export() -> None: ...

    q.task(name="send_email", queue="mail")(lambda to: None)
    q.enqueue("send_email", {"to": "ops@example.com"}, delay=1800)
    failed.append(fair_and_ordered(q))
    return {"q": q, "failed": failed, "running": running}


def fair_and_ordered(q: errands.Queue) -> int:
    """Jobs the queues page shows in its fair-share table (values with long names) and an
    ordered key held back by a failed head; returns the head's id."""

    @q.task(fair="tenant", queue="statements")
    def monthly_statement(tenant: str, n: int) -> None: ...

    for n in range(14):
        monthly_statement.enqueue(tenant=TENANTS[n % len(TENANTS)], n=n)
    # Two starts, as a worker's fair claim makes them: the dashboard learns the fair keys from
    # the turns stored (its own Queue registers no task).
    fair = fair_specs(t.options for t in q.tasks.values())
    started = ClaimRequest(LONG_WORKER, ["monthly_statement"], None, 2, 60.0, True, fair)
    assert len(q.backend.claim(started, q.clock())) == 2

    @q.task(order="account", order_on_failure="block", queue="ledger")
    def post_ledger_entry(account: str) -> None: ...

    head = post_ledger_entry.enqueue(account=LONG_ACCOUNT)
    post_ledger_entry.enqueue(account=LONG_ACCOUNT)
    now = q.clock()
    q.backend.declare_task_types(declared_rows(q.tasks, LONG_WORKER), now)  # as a worker does
    order = order_specs(t.options for t in q.tasks.values())
    request = ClaimRequest(LONG_WORKER, ["post_ledger_entry"], None, 5, 60.0, True, {}, order)
    (job,) = q.backend.claim(request, now)
    failure = Failed(job.id, 1, now, "LEDGER:REJECTED", "account is frozen", None)
    assert q.backend.finish([failure], LONG_WORKER, now, held=[job]) == [True]
    return head


PAGES = ("", "jobs", "jobs?view=retrying", "failures", "queues", "periodic", "workers", "activity")


def _wide(page: Any) -> bool:
    return bool(page.evaluate("document.documentElement.scrollWidth > window.innerWidth"))


def test_every_page_fits_800px_with_whole_error_codes(db_url: str, chromium: Any) -> None:
    world = build(db_url)
    try:
        with served(db_url) as base:
            page = chromium.new_page(viewport={"width": 800, "height": 900})
            for path in (*PAGES, f"jobs/{world['failed'][0]}"):
                page.goto(base + path)
                assert not _wide(page), f"/{path} scrolls sideways at 800 px"
                # Every error code wraps only after its category: each part on one line.
                broken = page.evaluate(
                    "Array.from(document.querySelectorAll('.ecode > span'))"
                    ".filter(s => s.getClientRects().length > 1).map(s => s.textContent)"
                )
                assert broken == [], (path, broken)
            # The queues page's tables fit without a scroll of their own: a long fair value,
            # limit group or ordered value wraps, the counts beside it stay in sight.
            page.goto(base + "queues")
            boxes = page.evaluate(
                "Array.from(document.querySelectorAll('.scroll'))"
                ".filter(d => d.scrollWidth > d.clientWidth + 1)"
                ".map(d => d.firstElementChild.className)"
            )
            assert boxes == [], f"/queues at 800 px hides columns of {boxes} behind a scroll"
            page.goto(base)
            # The per-state chart's labels keep a reading size (its SVG scaled to the column).
            height = page.evaluate(
                "Math.max(...Array.from(document.querySelectorAll('svg.counts text'))"
                ".map(t => t.getBoundingClientRect().height))"
            )
            assert height <= 20, height
            if UPDATE and not is_postgres(db_url):
                _screenshots(chromium, base, world)
            page.close()
    finally:
        world["q"].close()


def _screenshots(chromium: Any, base: str, world: dict[str, Any]) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    names = {
        "": "overview",
        "?window=7d&type=resize": "overview-type",
        "jobs": "jobs",
        "jobs?view=retrying": "retrying",
        "failures": "failures",
        "queues": "queues",
        "periodic": "periodic",
        "workers": "workers",
        f"jobs/{world['failed'][0]}": "job",
    }
    for scheme in ("light", "dark"):
        for width in (1366, 800):
            page = chromium.new_page(viewport={"width": width, "height": 860})
            page.emulate_media(color_scheme=scheme)
            for path, name in names.items():
                page.goto(base + path)
                page.screenshot(path=str(SHOTS / f"{name}-{width}-{scheme}.png"))
            # The queues page's fair share and blocked ordered keys, below its first screen.
            page.goto(base + "queues")
            page.evaluate("document.getElementById('fair-share').scrollIntoView()")
            page.screenshot(path=str(SHOTS / f"queues-fair-order-{width}-{scheme}.png"))
            page.close()


def test_a_tab_whose_session_ended_says_so(db_url: str, chromium: Any) -> None:
    from playwright.sync_api import expect

    world = build(db_url)
    try:
        with served(db_url, token=TOKEN) as base:
            page = chromium.new_page(viewport={"width": 1366, "height": 900})
            # Asked for a filtered list, sent to log in, brought back to it.
            page.goto(base + "jobs?status=failed")
            assert "/login" in page.url
            page.fill("input[name=token]", TOKEN)
            page.click("form.login button[type=submit]")
            page.wait_for_url("**/jobs?status=failed")
            assert page.locator("table.jobs td.pick a").count() == len(world["failed"])
            page.goto(base)
            expect(page.locator("#live-status")).to_have_text(
                "live: refreshes every 5 s", timeout=5_000
            )
            page.context.clear_cookies()  # the session ends (as after a logout elsewhere)
            expect(page.locator("#live-status")).to_contain_text("session ended", timeout=20_000)
            assert page.evaluate("document.body.dataset.live") == "0"
            page.close()
    finally:
        world["q"].close()


def test_ticked_rows_are_acted_on_once(db_url: str, chromium: Any) -> None:
    world = build(db_url)
    q: errands.Queue = world["q"]
    try:
        with served(db_url) as base:
            page = chromium.new_page(viewport={"width": 1366, "height": 900})
            page.goto(base + "jobs?status=failed")
            picked = world["failed"][:2]
            for job_id in picked:
                page.check(f"input[name=id][value='{job_id}']")
            page.click("#select-form button[value=retry]")
            page.wait_for_url("**acted=retry**")
            assert page.locator("#acted").inner_text().startswith("2 job(s) retried")
            events = [len(q.events(i)) for i in picked]
            page.reload()  # Post/Redirect/Get: a reload asks for the page, sends nothing
            page.wait_for_load_state()
            assert [len(q.events(i)) for i in picked] == events
            statuses = [q.get(i).status for i in picked]  # type: ignore[union-attr]
            assert statuses == ["queued", "queued"]
            page.close()
    finally:
        q.close()


def test_dark_mode_follows_the_system(db_url: str, chromium: Any) -> None:
    world = build(db_url)
    try:
        with served(db_url) as base:
            colors = {}
            for scheme in ("light", "dark"):
                page = chromium.new_page(viewport={"width": 1366, "height": 900})
                page.emulate_media(color_scheme=scheme)
                page.goto(base)
                colors[scheme] = page.evaluate(
                    "getComputedStyle(document.body).backgroundColor.match(/\\d+/g)"
                    ".slice(0, 3).map(Number)"
                )
                page.close()
            assert sum(colors["light"]) > 600 and sum(colors["dark"]) < 150, colors
    finally:
        world["q"].close()
