"""The overview's charts per type and queue in a real browser (Debian's chromium, driven by
Playwright), on both backends: choosing a type above the charts shows that type's charts at an
address that keeps it (and its JSON twin), readable at 800 px (no sideways scroll, tick text at
its size) and in dark mode (the selectors and chart lines follow the scheme).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

import errands
from helpers.ops import HOUR, run_job
from helpers.web import launch_chromium, served

LONG_TYPE = "reconcile_customer_invoices_for_the_previous_billing_period"


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    yield from launch_chromium()


def build(db_url: str) -> None:
    """Two days of ``resize`` (fast) and a long-named type (slow), in two queues."""
    with errands.Queue(db_url, durability="normal") as q:
        now = time.time()
        for h in range(48, 0, -3):
            at = now - h * HOUR
            run_job(q, "resize", run_at=at, started=at + 1, finished=at + 1.2)
            run_job(q, LONG_TYPE, run_at=at, started=at + 30, finished=at + 90, queue="billing")


def _wide(page: Any) -> bool:
    return bool(page.evaluate("document.documentElement.scrollWidth > window.innerWidth"))


def test_choosing_a_type_shows_its_charts_readable_at_800px_and_in_dark_mode(
    db_url: str, chromium: Any
) -> None:
    build(db_url)
    with served(db_url) as base:
        colors = {}
        for scheme in ("light", "dark"):
            page = chromium.new_page(viewport={"width": 800, "height": 900})
            page.emulate_media(color_scheme=scheme)
            page.goto(base + "?window=7d")
            page.select_option("#chart-type", LONG_TYPE)
            with page.expect_navigation():
                page.click(".chart-filter button")
            query = parse_qs(urlsplit(page.url).query)
            assert query == {"window": ["7d"], "type": [LONG_TYPE]}, page.url
            assert LONG_TYPE in page.inner_text("#chart-scope")
            assert page.eval_on_selector("#chart-type", "e => e.value") == LONG_TYPE
            # Its run time is a minute: the p50 line sits on the 1m tick, not at resize's 0.2 s.
            titles = page.eval_on_selector_all(
                "svg.latency-run circle title", "ts => ts.map(t => t.textContent)"
            )
            assert titles and all(t.endswith(": p50 60 s") or ": p95 60 s" in t for t in titles)
            assert not _wide(page), "the overview with a type scrolls sideways at 800 px"
            tick = page.evaluate(
                "Math.max(...Array.from(document.querySelectorAll('svg.latency text.tick'))"
                ".map(t => t.getBoundingClientRect().height))"
            )
            assert 6 <= tick <= 20, tick
            # The filter's controls stay on the page's width (they wrap rather than overflow).
            right = page.evaluate(
                "Math.max(...Array.from(document.querySelectorAll('.chart-filter *'))"
                ".map(e => e.getBoundingClientRect().right))"
            )
            assert right <= 800, right
            colors[scheme] = page.evaluate(
                "getComputedStyle(document.querySelector('#chart-type')).backgroundColor"
                ".match(/\\d+/g).slice(0, 3).map(Number)"
            )
            page.click("a.api >> text=charts as JSON")
            body = page.inner_text("body")
            assert f'"type": "{LONG_TYPE}"' in body or f'"type":"{LONG_TYPE}"' in body
            page.close()
        assert sum(colors["light"]) > 600 and sum(colors["dark"]) < 150, colors


def test_an_hour_alone_still_draws_its_points_and_sub_second_runs_read_in_ms(
    db_url: str, chromium: Any
) -> None:
    """One hour of data: a one-point line draws nothing, so each point must be a dot that
    shows (issue #36: 1,027 runs at p50 0.025 s drew an empty chart and read "0.0 s")."""
    with errands.Queue(db_url, durability="normal") as q:
        now = time.time()
        for i in range(20):
            at = now - 900 + i
            run_job(q, "resize", run_at=at, started=at + 0.01, finished=at + 0.035)
    with served(db_url) as base:
        for scheme in ("light", "dark"):
            page = chromium.new_page(viewport={"width": 1366, "height": 900})
            page.emulate_media(color_scheme=scheme)
            page.goto(base)
            dots = page.eval_on_selector_all(
                "svg.latency-run circle",
                "cs => cs.map(c => { const s = getComputedStyle(c), r = c.getBoundingClientRect();"
                " return {fill: s.fill, opacity: Number(s.fillOpacity), w: r.width}; })",
            )
            assert len(dots) == 2, dots  # p50 and p95 of the one hour
            for dot in dots:
                assert dot["opacity"] > 0 and dot["fill"] not in ("none", ""), (scheme, dot)
                assert dot["w"] >= 4, (scheme, dot)
            assert len({d["fill"] for d in dots}) == 2, "p50 and p95 in their lines' colours"
            run = page.inner_text("xpath=//th[text()='run p50 / p95']/following-sibling::td")
            assert run.startswith("25 ms"), run
            page.close()
