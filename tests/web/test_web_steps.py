"""The JSON API's durable steps (docs/durable-steps.md), on both backends: a job's steps in
``GET /api/admin/jobs/{id}``, and ``POST /api/admin/jobs/{id}/signal`` (guarded like every
mutation: tests/web/test_web_security.py)."""

from __future__ import annotations

from starlette.testclient import TestClient

import errands
from errands.context import JobContext
from errands.web import create_app

JSON = {"content-type": "application/json"}


def test_steps_are_listed_and_a_signal_wakes_the_job(queue: errands.Queue) -> None:
    @queue.task()
    def onboard(ctx: JobContext) -> object:
        ctx.step("create", lambda: {"id": 1})
        return ctx.wait_for("survey")

    job_id = onboard.enqueue()
    queue.run_worker(burst=True)
    c = TestClient(create_app(queue))
    steps = c.get(f"/api/admin/jobs/{job_id}").json()["steps"]
    assert [(s["kind"], s["name"], s["result"]) for s in steps] == [
        ("step", "create", {"id": 1}),
        ("wait", "survey", None),
    ]
    page = c.get(f"/jobs/{job_id}").text  # the dashboard's job page lists them too
    assert "Steps (2)" in page and "create" in page and "waiting for a signal" in page
    r = c.post(f"/api/admin/jobs/{job_id}/signal", json={"name": "survey", "payload": [9]})
    assert r.status_code == 200
    assert r.json() == {"id": job_id, "signal": "survey", "status": "queued"}
    queue.run_worker(burst=True)
    assert queue.get(job_id).result == [9]  # type: ignore[union-attr]
    # Finished: refused (409), as are a missing name (400) and an unknown job (404).
    r = c.post(f"/api/admin/jobs/{job_id}/signal", json={"name": "survey"})
    assert r.status_code == 409 and "finished job takes no signal" in r.text
    assert c.post(f"/api/admin/jobs/{job_id}/signal", json={}).status_code == 400
    body = '{"name": "a\\ud800"}'  # a lone surrogate, escaped as JSON allows
    r = c.post(f"/api/admin/jobs/{job_id}/signal", content=body, headers=JSON)
    assert r.status_code == 400
    assert c.post("/api/admin/jobs/999999/signal", json={"name": "x"}).status_code == 404


def test_retry_with_reset_steps_starts_the_job_over(queue: errands.Queue) -> None:
    ran: list[int] = []

    @queue.task(max_attempts=1)
    def charge(ctx: JobContext) -> int:
        ctx.step("charge", _charge, ran)
        if len(ran) < 2:
            raise RuntimeError("the mail server is down")
        return len(ran)

    job_id = charge.enqueue()
    queue.run_worker(burst=True)
    c = TestClient(create_app(queue))
    r = c.post(f"/api/admin/jobs/{job_id}/retry", json={"reset_steps": "yes"})
    assert r.status_code == 400 and "must be true or false" in r.json()["error"]
    assert c.post(f"/api/admin/jobs/{job_id}/retry", json={"reset_steps": False}).is_success
    queue.run_worker(burst=True)  # the recorded step replayed: it fails again
    assert (queue.get(job_id).status, ran) == ("failed", [1])  # type: ignore[union-attr]
    r = c.post(f"/api/admin/jobs/{job_id}/retry", json={"reset_steps": True})
    assert r.json() == {"id": job_id, "result": "retried", "status": "queued"}
    queue.run_worker(burst=True)
    assert queue.get(job_id).result == 2  # type: ignore[union-attr]
    assert ran == [1, 1]


def _charge(ran: list[int]) -> int:
    """A step with an effect the test counts."""
    ran.append(1)
    return len(ran)


def test_the_job_page_shows_durations_the_sleep_or_wait_and_sends_a_signal(
    queue: errands.Queue,
) -> None:
    """Issue #36: each call's duration, the sleep or wait in progress, and a "send signal"
    form (guarded like every form: tests/web/test_web_security.py)."""
    import re

    @queue.task()
    def nap(ctx: JobContext) -> None:
        ctx.step("prepare", lambda: 1)
        ctx.sleep(3600, name="cool-down")

    @queue.task()
    def onboard(ctx: JobContext) -> object:
        ctx.step("create", lambda: {"id": 1})
        return ctx.wait_for("survey", timeout=86400)

    napping, waiting = nap.enqueue(), onboard.enqueue()
    queue.run_worker(burst=True)
    c = TestClient(create_app(queue), follow_redirects=False)
    page = c.get(f"/jobs/{napping}").text
    pending = re.search(r'id="pending-step">(.*?)</div>', page, re.S)
    assert pending and "Sleeping" in pending.group(1) and "cool-down" in pending.group(1)
    assert "Send signal" not in page
    took = re.findall(r'<td class="took">([^<]*(?:<span[^>]*>[^<]*</span>)?)</td>', page)
    assert took[0].endswith(" ms") or took[0].endswith(" s"), took  # the step's run
    page = c.get(f"/jobs/{waiting}").text
    pending = re.search(r'id="pending-step">(.*?)</div>', page, re.S)
    assert pending and "Waiting for the signal" in pending.group(1)
    assert "<code>survey</code>" in pending.group(1) and "times out" in pending.group(1)
    token = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    assert token and 'class="signal-form"' in page
    bad = c.post(
        f"/jobs/{waiting}/signal",
        data={"csrf": token.group(1), "name": "survey", "payload": "{nope"},
    )
    assert bad.status_code == 400 and "payload must be JSON" in bad.text
    r = c.post(
        f"/jobs/{waiting}/signal",
        data={"csrf": token.group(1), "name": "survey", "payload": '{"score": 9}'},
    )
    assert r.status_code == 303 and r.headers["location"].endswith("?done=signal")
    assert "Signal sent" in c.get(r.headers["location"]).text
    assert queue.events(waiting)[-1].actor == "api"
    queue.run_worker(burst=True)
    assert queue.get(waiting).result == {"score": 9}  # type: ignore[union-attr]
    page = c.get(f"/jobs/{waiting}").text
    assert 'id="pending-step"' not in page  # over: the wait has its duration
    assert "waiting</span>" not in page
