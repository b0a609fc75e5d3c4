"""Flow control through the CLI, the JSON API and /metrics, on both backends
(docs/flow-control.md)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from starlette.testclient import TestClient

import errands
from errands.cli import main
from errands.cli.common import cli_actor
from errands.context import JobContext
from errands.web import create_app

JSON = {"content-type": "application/json"}


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def limited_app(q: errands.Queue) -> None:
    @q.task(limit=errands.Limit("t", running=1, group="tenant"))
    def sync(tenant: str) -> None: ...

    @q.task(queue="emails")
    def mail(ctx: JobContext) -> None:
        ctx.progress(0.25, "a quarter")


def test_cli_pause_resume_queues(
    db_url: str, queue: errands.Queue, capsys: pytest.CaptureFixture[str]
) -> None:
    limited_app(queue)
    queue.enqueue("mail", {})
    code, out, _ = run(["pause", "emails", "--reason", "smtp down", "--db", db_url], capsys)
    assert code == 0 and "paused queue 'emails'" in out
    code, out, _ = run(["queues", "--db", db_url], capsys)
    assert code == 0 and "emails" in out and "paused" in out and "smtp down" in out
    code, out, _ = run(["queues", "--json", "--db", db_url], capsys)
    (emails,) = [q for q in json.loads(out) if q["name"] == "emails"]
    assert (
        emails["paused"] and emails["paused_by"] == cli_actor() and emails["counts"]["queued"] == 1
    )
    code, out, _ = run(["stats", "--db", db_url], capsys)
    assert f"paused    emails by {cli_actor()}" in out and "smtp down" in out
    code, out, _ = run(["stats", "--json", "--db", db_url], capsys)
    assert [p["name"] for p in json.loads(out)["paused_queues"]] == ["emails"]
    # check: a pause older than --max-pause is a problem (0s: any pause is)
    code, out, _ = run(["check", "--max-pause", "0s", "--max-wait", "1d", "--db", db_url], capsys)
    assert code == 1 and "queue 'emails' paused for" in out
    code, out, _ = run(["resume", "emails", "--db", db_url], capsys)
    assert code == 0 and "resumed queue 'emails'" in out
    code, out, _ = run(["resume", "emails", "--db", db_url], capsys)
    assert code == 0 and "was not paused" in out
    code, _, err = run(["pause", "--db", db_url], capsys)
    assert code == 2 and "QUEUE" in err


def test_cli_limits(db_url: str, queue: errands.Queue, capsys: pytest.CaptureFixture[str]) -> None:
    limited_app(queue)
    for tenant in ["a", "a", "b"]:
        queue.enqueue("sync", {"tenant": tenant})
    code, out, _ = run(
        ["limit", "set", "t", "--running", "3", "--rate", "10/60", "--db", db_url], capsys
    )
    assert code == 0
    code, out, _ = run(["limits", "--db", db_url], capsys)
    assert code == 0 and "10/60s" in out and "set" in out
    code, out, _ = run(["limits", "--json", "--db", db_url], capsys)
    (t,) = json.loads(out)
    assert (t["key"], t["running"], t["rate"], t["source"], t["set_by"]) == (
        "t",
        3,
        [10, 60.0],
        "set",
        cli_actor(),
    )
    assert t["groups"] == {"a": {"running": 0, "waiting": 2}, "b": {"running": 0, "waiting": 1}}
    code, out, _ = run(["limit", "clear", "t", "--db", db_url], capsys)
    assert code == 0 and "cleared" in out
    code, _, err = run(["limit", "set", "t", "--rate", "ten", "--db", db_url], capsys)
    assert code == 2 and "N/SECONDS" in err
    code, _, err = run(["limit", "set", "t", "--db", db_url], capsys)
    assert code == 2 and "caps nothing: give --running N, --rate N/SECONDS" in err  # usage
    code, _, err = run(["limit", "set", "t", "--rate", "1000000000000/1", "--db", db_url], capsys)
    assert code == 2 and "n from 1 to 1,000,000" in err


def test_cli_shows_progress(
    db_url: str, queue: errands.Queue, capsys: pytest.CaptureFixture[str]
) -> None:
    limited_app(queue)
    job_id = queue.enqueue("mail", {})
    queue.run_worker(burst=True, concurrency=1)
    code, out, _ = run(["show", str(job_id), "--db", db_url], capsys)
    assert code == 0 and "25% a quarter" in out
    code, out, _ = run(["jobs", "--db", db_url], capsys)
    assert "PROGRESS" in out and "25%" in out
    code, out, _ = run(["jobs", "--json", "--db", db_url], capsys)
    (job,) = json.loads(out)
    assert (job["progress"], job["progress_message"]) == (0.25, "a quarter")


def test_http_queues_pause_resume_and_limits(queue: errands.Queue) -> None:
    limited_app(queue)
    queue.enqueue("sync", {"tenant": "a"})
    with TestClient(create_app(queue)) as c:
        r = c.post("/api/admin/queues/emails/pause", json={"reason": "smtp"}, headers=JSON)
        assert r.status_code == 200 and r.json() == {"queue": "emails", "result": "paused"}
        queues = {q["name"]: q for q in c.get("/api/admin/queues").json()["queues"]}
        assert queues["emails"]["paused"] and queues["emails"]["reason"] == "smtp"
        assert queues["emails"]["paused_by"] == "api"
        assert not queues["default"]["paused"]
        metrics = c.get("/metrics").text
        assert 'errands_queue_paused{queue="emails"} 1.0' in metrics
        assert 'errands_queue_paused{queue="default"} 0.0' in metrics
        assert 'errands_limit_waiting{group="a",key="t"} 1.0' in metrics
        r = c.post("/api/admin/queues/emails/resume", headers=JSON)
        assert r.json() == {"queue": "emails", "result": "resumed"}
        r = c.post("/api/admin/queues/emails/resume", headers=JSON)
        assert r.json() == {"queue": "emails", "result": "not_paused"}
        r = c.post("/api/admin/queues/emails/pause", json={"reason": 5}, headers=JSON)
        assert r.status_code == 400 and "reason" in r.json()["error"]
        queue.set_limit("t", running=2)
        (lim,) = c.get("/api/admin/limits").json()["limits"]
        assert (lim["key"], lim["running"], lim["groups"]["a"]["waiting"]) == ("t", 2, 1)
        # A cross-site form post (no JSON content type) is refused and changes nothing.
        r = c.post("/api/admin/queues/emails/pause", data={"reason": "x"})
        assert r.status_code == 403
    assert not any(q.paused for q in queue.queues())
    with TestClient(create_app(queue, read_only=True)) as c:
        assert c.post("/api/admin/queues/emails/pause", headers=JSON).status_code == 403
        assert c.get("/api/admin/queues").status_code == 200
    assert not any(q.paused for q in queue.queues())


def test_the_json_job_object_has_progress_and_limit(queue: errands.Queue) -> None:
    limited_app(queue)
    job_id = queue.enqueue("sync", {"tenant": "acme"})
    with TestClient(create_app(queue)) as c:
        job: dict[str, Any] = c.get(f"/api/admin/jobs/{job_id}").json()["job"]
    assert (job["limit_key"], job["limit_group"], job["progress"]) == ("t", "acme", None)


def test_check_reports_a_job_snoozing_in_a_loop(
    db_url: str, queue: errands.Queue, capsys: pytest.CaptureFixture[str]
) -> None:
    @queue.task
    def poll(ctx: JobContext) -> None:
        raise errands.Snooze(0 if ctx.attempt < 3 else 3600)

    job_id = queue.enqueue("poll", {})
    queue.run_worker(burst=True, concurrency=1)  # three starts, each snoozed: queued again
    base = ["check", "--max-wait", "1d", "--db", db_url]  # (no worker runs: that is reported)
    assert "snoozing" not in run(base, capsys)[1]  # under the default --snooze-loop 100
    code, out, _ = run([*base, "--snooze-loop", "3"], capsys)
    assert code == 1 and f"snoozing in a loop: #{job_id} (poll, 3 starts)" in out
    assert "snoozing" not in run([*base, "--snooze-loop", "4"], capsys)[1]


def test_a_queue_name_with_a_comma_is_refused_by_pause_like_every_other_path(
    db_url: str, queue: errands.Queue, capsys: pytest.CaptureFixture[str]
) -> None:
    for verb in (queue.pause, queue.resume):
        with pytest.raises(errands.ConfigurationError, match="contains a comma"):
            verb("a,b")
    code, _, err = run(["pause", "a,b", "--db", db_url], capsys)
    assert code == 2 and err.strip().splitlines()[-1].startswith("errands: argument QUEUE: ")
    assert "contains a comma" in err and "Traceback" not in err
    with TestClient(create_app(queue)) as c:  # the JSON API: refused like a NUL in a name
        r = c.post("/api/admin/queues/a,b/pause", json={}, headers=JSON)
        assert r.status_code == 409 and "contains a comma" in r.json()["error"]
    assert queue.queues() == []  # nothing was paused
    queue.pause("*")  # every queue: still a pause of its own
    assert [i.name for i in queue.queues()] == ["*"]


def test_a_misspelt_queue_is_warned_about_by_pause_and_worker(
    db_url: str, queue: errands.Queue, capsys: pytest.CaptureFixture[str], tmp_path: Any
) -> None:
    limited_app(queue)
    queue.enqueue("mail", {})  # queue 'emails' has a job
    code, _, err = run(["pause", "emals", "--db", db_url], capsys)
    assert code == 0 and "no task, job or worker uses queue 'emals': is it misspelled?" in err
    code, _, err = run(["pause", "emails", "--db", db_url], capsys)
    assert code == 0 and "misspelled" not in err
    (tmp_path / "typo_app.py").write_text(
        "import errands\nq = errands.Queue(" + repr(db_url) + ")\n\n"
        "@q.task(queue='reports')\ndef report() -> None: ...\n"
    )
    import sys

    sys.path.insert(0, str(tmp_path))
    try:
        argv = ["worker", "--app", "typo_app", "--burst", "--db", db_url]
        code, _, err = run([*argv, "--queues", "reports,emals"], capsys)
        assert code == 0 and "uses queue 'emals': is it misspelled?" in err
        sys.modules.pop("typo_app")  # its Queue was closed by that worker: a fresh one
        code, _, err = run([*argv, "--queues", "reports,emails"], capsys)  # a job uses it
        assert code == 0 and "misspelled" not in err, err
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("typo_app", None)
