"""The operator's new buttons in a real browser (Debian's chromium, driven by Playwright), on
both backends (issue #25): ticked rows get a new priority, run now or are deleted (after a
confirmation a "no" keeps them), the job page's buttons, the periodic page's disable, enable and
run now — each acted on once (a reload sends nothing) — and a hostile schedule name runs no
script."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import errands
from helpers.web import launch_chromium, served

HOSTILE = '<img src=x onerror="alert(1)"><script>alert(2)</script>'


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """The system chromium, or a skip saying why."""
    yield from launch_chromium()


@pytest.fixture
def q(db_url: str) -> Iterator[errands.Queue]:
    with errands.Queue(db_url) as queue:
        yield queue


def _scheduled(q: errands.Queue, n: int) -> list[int]:
    return [q.enqueue("remind", {"n": i}, delay=3600, queue="mail") for i in range(n)]


def _dialogs(page: Any, accept: bool) -> list[str]:
    """Answer every dialog (``confirm``) with ``accept``; the texts shown are collected."""
    seen: list[str] = []

    def answer(dialog: Any) -> None:
        seen.append(dialog.message)
        if accept:
            dialog.accept()
        else:
            dialog.dismiss()

    page.on("dialog", answer)
    return seen


def test_ticked_rows_priority_run_now_and_delete(
    db_url: str, q: errands.Queue, chromium: Any
) -> None:
    a, b, c = _scheduled(q, 3)
    with served(db_url) as base:
        page = chromium.new_page(viewport={"width": 1366, "height": 900})
        page.goto(base + "jobs?status=queued")
        for job_id in (a, b):
            page.check(f"input[name=id][value='{job_id}']")
        page.fill("#select-form input[name=priority]", "-12")
        page.click("#select-form button[value=priority]")
        page.wait_for_url("**acted=priority**")
        assert page.locator("#acted").inner_text().startswith("2 job(s) given the new priority")
        assert [q.get(i).priority for i in (a, b, c)] == [-12, -12, 0]  # type: ignore[union-attr]
        events = len(q.events(a))
        page.reload()  # Post/Redirect/Get: a reload asks for the page, sends nothing
        page.wait_for_load_state()
        assert len(q.events(a)) == events

        page.goto(base + "jobs?status=queued")
        page.check(f"input[name=id][value='{c}']")
        page.click("#select-form button[value=run_now]")
        page.wait_for_url("**acted=run_now**")
        assert page.locator("#acted").inner_text().startswith("1 job(s) made due now")
        assert q.events(c)[-1].event == "RESCHEDULED"

        said = _dialogs(page, accept=False)
        page.goto(base + "jobs?status=queued")
        page.check(f"input[name=id][value='{a}']")
        page.click("#select-form button[value=delete]")
        page.wait_for_timeout(300)
        assert said and "cannot be undone" in said[0]
        assert q.get(a) is not None  # "no": nothing was sent
        page.close()

        page = chromium.new_page(viewport={"width": 1366, "height": 900})
        _dialogs(page, accept=True)
        page.goto(base + "jobs?status=queued")
        page.check(f"input[name=id][value='{a}']")
        page.check(f"input[name=id][value='{b}']")
        page.click("#select-form button[value=delete]")
        page.wait_for_url("**acted=delete**")
        assert page.locator("#acted").inner_text().startswith("2 job(s) deleted")
        assert q.get(a) is None and q.get(b) is None and q.get(c) is not None
        page.close()


def test_job_page_buttons(db_url: str, q: errands.Queue, chromium: Any) -> None:
    (job_id,) = _scheduled(q, 1)
    with served(db_url) as base:
        page = chromium.new_page(viewport={"width": 1366, "height": 900})
        _dialogs(page, accept=True)
        page.goto(base + f"jobs/{job_id}")
        assert page.locator(f"code[data-copy='errands delete {job_id}']").count() == 1
        page.fill("input[name=priority]", "42")
        page.click("button[value=priority]")
        page.wait_for_load_state()
        assert q.get(job_id).priority == 42  # type: ignore[union-attr]
        page.click("button[value=run_now]")
        page.wait_for_load_state()
        assert page.locator("button[value=run_now]").count() == 0  # due now: no button
        assert "RESCHEDULED" in page.content()
        page.click("button[value=delete]")
        page.wait_for_url(f"**deleted={job_id}")
        assert page.locator("#deleted").inner_text() == (
            f"Job #{job_id} deleted, with its attempts and events."
        )
        assert q.get(job_id) is None
        page.close()


def test_periodic_disable_enable_and_run_now(db_url: str, q: errands.Queue, chromium: Any) -> None:
    @q.periodic(every=3600, name="nightly")
    def nightly() -> None: ...

    q.periodic(every=3600, name=HOSTILE)(lambda: None)
    with served(db_url) as base:
        page = chromium.new_page(viewport={"width": 1366, "height": 900})
        said = _dialogs(page, accept=True)
        page.goto(base + "periodic")
        row = page.locator("tr[data-schedule='nightly']")
        row.locator("button", has_text="Disable").click()
        page.wait_for_url("**switched=disable**")
        row = page.locator("tr[data-schedule='nightly']")
        assert row.locator(".badge").inner_text() == "disabled"
        (shown,) = [r for r in q.backend.list_periodic() if r.name == "nightly"]
        assert shown.disabled_by == "api"
        row.locator("button", has_text="Run now").click()
        page.wait_for_url("**ran=**")
        assert "(manual)" in page.locator("#ran").inner_text()
        assert len(q.jobs(type="nightly")) == 1
        page.reload()
        page.wait_for_load_state()
        assert len(q.jobs(type="nightly")) == 1  # the reload enqueued nothing more
        page.locator("tr[data-schedule='nightly'] button", has_text="Enable").click()
        page.wait_for_url("**switched=enable**")
        assert page.locator("tr[data-schedule='nightly'] .badge").count() == 0
        # the hostile name: shown as text, its own buttons work, no script ran
        hostile = page.locator("tr", has_text="<script>alert(2)</script>")
        hostile.locator("button", has_text="Disable").click()
        page.wait_for_url("**switched=disable**")
        assert "<script>alert(2)</script>" in page.locator("#switched").inner_text()
        assert said == []  # no alert() from any page
        page.close()
