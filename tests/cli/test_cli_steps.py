"""``errands show`` lists a job's durable steps and ``errands signal`` sends one
(docs/durable-steps.md), in process, on both backends."""

from __future__ import annotations

import json

import pytest

import errands
from errands.cli import main
from errands.cli.common import cli_actor
from errands.context import JobContext


def test_show_lists_steps_and_signal_wakes_the_job(
    db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with errands.Queue(db_url) as q:

        @q.task()
        def onboard(ctx: JobContext) -> object:
            ctx.step("create_account", lambda: {"id": 7})
            return ctx.wait_for("survey", timeout=3600)

        job_id = onboard.enqueue()
        q.run_worker(burst=True)
        assert main(["--db", db_url, "show", str(job_id)]) == 0
        out = capsys.readouterr().out
        assert "Steps (2)" in out
        assert "create_account" in out and '{"id": 7}' in out
        assert "waiting for a signal, timeout" in out
        assert main(["--db", db_url, "show", str(job_id), "--json"]) == 0
        shown = json.loads(capsys.readouterr().out)
        assert [s["name"] for s in shown["steps"]] == ["create_account", "survey"]

        argv = ["--db", db_url, "signal", str(job_id), "survey", "--payload", '{"score": 9}']
        assert main(argv) == 0
        assert "job is queued" in capsys.readouterr().out
        q.run_worker(burst=True)
        job = q.get(job_id)
        assert job is not None and (job.status, job.result) == ("succeeded", {"score": 9})
        (signalled,) = [e for e in q.events(job_id) if e.event == "SIGNALLED"]
        assert signalled.actor == cli_actor() and signalled.detail == {"by": "signal survey"}

        assert main(["--db", db_url, "signal", str(job_id), "survey"]) == 1
        assert "succeeded: a finished job takes no signal" in capsys.readouterr().err
        assert main(["--db", db_url, "signal", str(job_id), "s", "--payload", "NaN"]) == 2
        assert "not valid JSON" in capsys.readouterr().err


def test_retry_reset_steps_starts_a_failed_job_over(
    db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``errands retry ID`` replays the recorded steps; ``--reset-steps`` forgets them, so
    the job runs from its first step; with ``--status`` it is refused (a choice per job)."""
    ran: list[int] = []
    with errands.Queue(db_url) as q:

        @q.task(max_attempts=1)
        def charge(ctx: JobContext) -> int:
            ctx.step("charge", _charge, ran)
            if len(ran) < 2:
                raise RuntimeError("the mail server is down")
            return len(ran)

        job_id = charge.enqueue()
        q.run_worker(burst=True)
        assert main(["--db", db_url, "retry", str(job_id)]) == 0
        assert capsys.readouterr().out.strip() == f"job {job_id}: queued to run again"
        q.run_worker(burst=True)
        assert (q.get(job_id).status, ran) == ("failed", [1])  # type: ignore[union-attr]

        argv = ["--db", db_url, "retry", "--status", "failed", "--reset-steps", "--yes"]
        assert main(argv) == 2
        assert "--reset-steps takes job ids" in capsys.readouterr().err
        assert main(["--db", db_url, "retry", str(job_id), "--reset-steps"]) == 0
        out = capsys.readouterr().out.strip()
        assert out == f"job {job_id}: queued to run again from its first step"
        q.run_worker(burst=True)
        job = q.get(job_id)
        assert job is not None and (job.status, job.result, ran) == ("succeeded", 2, [1, 1])
        assert [(s.name, s.attempt) for s in q.steps(job_id)] == [("charge", 3)]


def _charge(ran: list[int]) -> int:
    """A step with an effect the test counts."""
    ran.append(1)
    return len(ran)
