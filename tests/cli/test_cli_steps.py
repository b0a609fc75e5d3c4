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
