"""What the dashboard's third review found wrong (issue #36), on both backends: each test here
failed before its fix. Bulk delete, run now and priority by filter from the confirm page; a
notice on the job page after each of its buttons; the previous attempt's start, worker and
progress marked as that attempt's after a retry; one summary line for unhandled types with a
link to the list; times inside sentences in the pages' one format; sub-second figures in ms;
and the snoozed jobs' view."""

from __future__ import annotations

import re
from typing import Any

import pytest
from starlette.testclient import TestClient

import errands
from errands.web import create_app
from helpers.ops import HOUR, register_worker, run_job
from helpers.support import EPOCH, FixedClock, get_job
from helpers.web import populate

RAW_ISO = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}")


@pytest.fixture
def jobs(queue: errands.Queue) -> dict[str, Any]:
    return populate(queue)


def _csrf(c: TestClient, path: str) -> str:
    match = re.search(r'name="csrf" value="([0-9a-f]+)"', c.get(path).text)
    assert match, f"{path} has no CSRF field"
    return match.group(1)


def _bulk(c: TestClient, query: dict[str, str], extra: dict[str, str] | None = None) -> str:
    """Open the confirm page (the count first), press its button, read the page it leads to."""
    page = c.get("/bulk/confirm", params=query)
    assert page.status_code == 200, page.text
    token = _csrf(c, "/bulk/confirm?action=retry&status=failed")
    fields = {**query, "csrf": token, **(extra or {})}
    done = c.post("/bulk", data=fields, follow_redirects=False)
    assert done.status_code == 303, done.text
    return c.get(done.headers["location"]).text


def test_delete_run_now_and_priority_by_filter_count_first_then_act(
    queue: errands.Queue, jobs: dict[str, Any]
) -> None:
    c = TestClient(create_app(queue))
    page = c.get("/bulk/confirm", params={"action": "delete", "status": "succeeded"})
    assert page.status_code == 200 and re.search(r'id="bulk-count">5<', page.text)
    text = _bulk(c, {"action": "delete", "status": "succeeded", "type": "resize"})
    assert re.search(r'id="bulk-done">5 job\(s\) deleted', text)
    assert all(queue.get(i) is None for i in jobs["ok"])

    later = jobs["queued"]
    page = c.get("/bulk/confirm", params={"action": "priority", "status": "queued"})
    assert re.search(r'id="bulk-count">2<', page.text) and 'name="priority"' in page.text
    text = _bulk(c, {"action": "priority", "status": "queued", "queue": "mail"}, {"priority": "9"})
    assert re.search(r'id="bulk-done">2 job\(s\) given the new priority \(9\)', text)
    assert [get_job(queue, i).priority for i in later] == [9, 9]
    bad = c.post(
        "/bulk",
        data={"action": "priority", "status": "queued", "priority": "x", "csrf": _csrf(c, "/jobs")},
    )
    assert bad.status_code == 400 and "priority must be a whole number" in bad.text

    text = _bulk(c, {"action": "run_now", "status": "queued"})
    assert re.search(r'id="bulk-done">2 job\(s\) made due now', text)
    now = queue.clock()
    assert all(get_job(queue, i).run_at.timestamp() <= now for i in later)  # type: ignore[union-attr]
    # A verb the status does not allow is refused with what to do, before any count.
    wrong = c.get("/bulk/confirm", params={"action": "run_now", "status": "failed"})
    assert wrong.status_code == 400 and "status" in wrong.text


def test_the_list_offers_every_verb_its_status_allows(
    queue: errands.Queue, jobs: dict[str, Any]
) -> None:
    c = TestClient(create_app(queue))
    offered = set(re.findall(r'data-bulk="([a-z_]+)"', c.get("/jobs?status=queued").text))
    assert offered == {"cancel", "run_now", "priority", "delete"}
    offered = set(re.findall(r'data-bulk="([a-z_]+)"', c.get("/jobs?status=failed").text))
    assert offered == {"retry", "delete"}
    assert (
        "data-bulk"
        not in TestClient(create_app(queue, read_only=True)).get("/jobs?status=failed").text
    )


def test_each_job_button_says_what_it_did(queue: errands.Queue, jobs: dict[str, Any]) -> None:
    c = TestClient(create_app(queue))
    failed, later = jobs["failed"][0], jobs["queued"][0]
    token = _csrf(c, f"/jobs/{failed}")
    said = {}
    for job_id, verb, extra in (
        (later, "priority", {"priority": "4"}),
        (later, "run_now", {}),
        (later, "cancel", {}),
        (failed, "retry", {}),
    ):
        r = c.post(f"/jobs/{job_id}/{verb}", data={"csrf": token, **extra})
        match = re.search(r'id="job-done">([^<]+)<', r.text)
        assert r.status_code == 200 and match, (verb, r.text[:200])
        said[verb] = match.group(1)
    assert said == {
        "priority": "Priority changed.",
        "run_now": "Made due now: the next free worker runs it.",
        "cancel": "Cancelled.",
        "retry": "Retried: the job is queued again with one more attempt.",
    }
    # The notice is a fixed text chosen by the address: a made-up one shows nothing.
    assert 'id="job-done"' not in c.get(f"/jobs/{failed}?done=<b>hi</b>").text


def test_after_a_retry_the_last_attempts_progress_worker_and_start_are_marked(
    queue: errands.Queue,
) -> None:
    @queue.task(max_attempts=1)
    def crunch(ctx: errands.JobContext) -> None:
        ctx.progress(0.3, "a third")
        raise errands.JobError("APP:BROKEN", "no", retry=False)

    job_id = crunch.enqueue()
    queue.run_worker(burst=True, handle_signals=False)
    c = TestClient(create_app(queue))
    page = c.get(f"/jobs/{job_id}").text
    assert "<th>progress</th>" in page and 'id="past-attempt"' not in page  # failed: its own
    queue.retry(job_id)
    page = c.get(f"/jobs/{job_id}").text
    assert "<th>progress</th>" not in page, "the old progress still reads as current"
    past = re.search(r'id="past-attempt">(.*?)</tr>', page, re.S)
    assert past and "#1, before this job was queued again" in past.group(1)
    assert "30%" in past.group(1) and "a third" in past.group(1)
    worker = get_job(queue, job_id).worker_id
    assert worker and worker.rsplit(":", 1)[1] in past.group(1)  # the name wraps at its ':'s
    assert "<th>started</th><td>not yet (this run)</td>" in page


def test_unhandled_types_are_one_line_with_a_link(q: errands.Queue, clock: FixedClock) -> None:
    register_worker(q, "w1", at=EPOCH, types=["known"])
    for i in range(12):
        q.enqueue(f"orphan_{i:02}", {})
    q.enqueue("known", {})
    c = TestClient(create_app(q))
    page = c.get("/").text
    lines = re.findall(r'<p class="alert"[^>]*>Unhandled', page)
    assert len(lines) == 1, "one summary line, not one banner per type"
    line = re.search(r'id="unhandled-summary">(.*?)</p>', page, re.S)
    assert line and "12 queued job(s) of 12 type(s)" in line.group(1)
    assert "and 9 more" in line.group(1) and 'href="http://testserver/workers#unhandled"' in page
    workers = c.get("/workers").text
    assert 'id="unhandled"' in workers
    listed = re.findall(r"<tr><td>default</td><td class=\"type\"><a href=\"([^\"]+)\">", workers)
    assert len(listed) == 12 and "known" not in "".join(listed)
    assert "status=queued" in listed[0] and "type=orphan_00" in listed[0]


def test_times_in_sentences_use_the_pages_format(q: errands.Queue, clock: FixedClock) -> None:
    q.periodic(every=60, name="beat", grace=60)(lambda: None)
    clock.now = EPOCH + 3600
    c = TestClient(create_app(q))
    for path in ("/", "/periodic"):
        page = c.get(path).text
        assert "tick at " in page, path
        shown = re.sub(r'datetime="[^"]*"', "", page)  # <time datetime=…> is for machines
        assert not RAW_ISO.search(shown), (path, RAW_ISO.search(shown))
        assert re.search(r"tick at \d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} UTC", page), path


def test_sub_second_figures_are_shown_in_ms(q: errands.Queue, clock: FixedClock) -> None:
    now = EPOCH + 10 * HOUR
    clock.now = now
    for i in range(4):
        at = now - 600 + i
        run_job(q, "resize", run_at=at, started=at + 0.5, finished=at + 0.525)
    page = TestClient(create_app(q)).get("/").text
    row = re.search(r"<th>run p50 / p95</th><td>([^<]*)</td>", page)
    assert row and row.group(1).startswith("25 ms"), row and row.group(1)
    wait = re.search(r"<th>wait p50 / p95</th><td>([^<]*)</td>", page)
    assert wait and wait.group(1).startswith("500 ms"), wait and wait.group(1)


def test_the_snoozed_view_lists_jobs_whose_last_attempt_snoozed(queue: errands.Queue) -> None:
    @queue.task
    def later() -> None:
        raise errands.Snooze(3600)

    @queue.task
    def flaky() -> None:
        raise errands.JobError("APP:BROKEN", "again")

    snoozed = later.enqueue()
    retrying = flaky.enqueue()
    queue.run_worker(burst=True, handle_signals=False)
    c = TestClient(create_app(queue))
    page = c.get("/jobs?view=snoozed").text
    listed = re.findall(r'<a href="[^"]*/jobs/(\d+)">', page)
    assert listed == [str(snoozed)] and str(retrying) not in listed
    assert "<th>comes back</th>" in page
    assert c.get("/api/admin/jobs?view=snoozed").json()["jobs"][0]["id"] == snoozed
