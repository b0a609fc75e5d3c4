"""The activity page in Chromium (docs/dashboard.md, "Who acted"), on both backends: a pause
made with the queues page's form shows on /activity (reached from the navigation) with its
actor, the filters narrow it, an actor holding markup is shown as text, and the page fits
800 px."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import errands
from helpers.web import launch_chromium, served

XSS = '<img src=x onerror="window.__xss=1">'


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    yield from launch_chromium()


def test_the_activity_page_in_a_browser(db_url: str, chromium: Any) -> None:
    with errands.Queue(db_url) as q:
        q.enqueue("mail", {}, queue="emails")
        q.set_limit("smtp", running=2, actor=XSS)
    with served(db_url) as base:
        page = chromium.new_page(viewport={"width": 800, "height": 900})
        page.goto(base + "queues")
        form = page.locator("form.pause").filter(has=page.locator("input[value=emails]"))
        form.locator("input[name=reason]").fill("smtp down")
        form.locator("button[type=submit]").click()
        page.wait_for_load_state()
        page.click("header nav a:text('Activity')")
        assert page.url.rstrip("/").endswith("/activity")
        rows = page.locator("table.activity tr").all_inner_texts()
        assert "pause" in rows[1] and "api" in rows[1] and "emails" in rows[1]
        assert "set_limit" in rows[2] and XSS in rows[2]  # markup shown as text
        assert page.evaluate("window.__xss") is None
        assert not page.evaluate("document.documentElement.scrollWidth > window.innerWidth")
        page.select_option("select[name=action]", "set_limit")
        page.click("form.filters button[type=submit]")
        page.wait_for_load_state()
        rows = page.locator("table.activity tr").all_inner_texts()
        assert len(rows) == 2 and "set_limit" in rows[1]
        page.close()
