"""A handler's bad values against a real worker process, both backends (docs/flow-control.md):
``ctx.progress`` refuses what no backend could store at the call, so nothing reaches the
worker's own loop (its heartbeat's progress flush) to stop it.
"""

from __future__ import annotations

import json
from pathlib import Path

import errands
from helpers.support import get_job, run_cli

APP = """
import math, os
import errands

q = errands.Queue(os.environ["HOSTILE_DB"])

# The surrogate last: the value a worker without the rule wrote at its next flush, and died.
BAD = [(0.2, "nul\\x00"), (40, None), (math.nan, None), ("0.5", None), (0.2, "t\\udcff")]


@q.task
def report(ctx: errands.JobContext) -> list[str]:
    ctx.progress(0.1, "started")
    refused = []
    for fraction, message in BAD:
        try:
            ctx.progress(fraction, message)
        except ValueError as exc:
            refused.append(str(exc))
    return refused


@q.task
def after() -> str:
    return "ran"
"""


def test_bad_progress_is_refused_at_the_call_and_the_worker_runs_on(
    db_url: str, tmp_path: Path
) -> None:
    (tmp_path / "hostile_app.py").write_text(APP)
    with errands.Queue(db_url) as q:
        first = q.enqueue("report")
        second = q.enqueue("after")
        argv = ["--db", db_url, "worker", "--app", "hostile_app", "--burst", "--json"]
        r = run_cli(tmp_path, *argv, "--concurrency", "1", env={"HOSTILE_DB": db_url})
        assert r.returncode == 0, r.stderr
        assert "Traceback" not in r.stderr, r.stderr
        assert json.loads(r.stdout)["succeeded"] == 2
        job = get_job(q, first)
        assert job.status == "succeeded"
        assert (job.progress, job.progress_message) == (0.1, "started")  # the valid one
        refused = job.result
        assert len(refused) == 5, refused
        assert "NUL" in refused[0] and "lone surrogate" in refused[4]
        assert all("from 0 to 1" in text for text in refused[1:4]), refused
        assert get_job(q, second).result == "ran"
