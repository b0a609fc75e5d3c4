"""The worker tells what it does: standard ``logging`` under ``errands``, one line per failed
attempt, retry, refusal and rescue by default; starts and successes with ``--verbose``; JSON
lines with ``--log-format json``."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import errands
from errands.backends.base import ClaimRequest, Succeeded
from errands.maintenance.rescuer import Rescuer

TIMEOUT = 120  # a bound for a hung command, never a performance assertion

APP = """
import errands

q = errands.Queue("app.db")


@q.task(max_attempts=2, backoff=errands.fixed(0))
def flaky(n: int) -> int:
    raise errands.JobError("UPSTREAM:DOWN", f"upstream refused {n}")


@q.task
def fine() -> str:
    return "ok"
"""


def worker(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp / "app.py").write_text(textwrap.dedent(APP))
    with errands.Queue(str(tmp / "app.db")) as q:
        q.enqueue("flaky", {"n": 7}, max_attempts=2)
        q.enqueue("fine", {})
    env = {k: v for k, v in os.environ.items() if k != "ERRANDS_DB"}
    r = subprocess.run(
        [sys.executable, "-m", "errands", "worker", "--app", "app", "--burst", *args],
        cwd=tmp,
        env={**env, "PYTHONPATH": str(tmp)},
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert r.returncode == 0, r.stderr
    return r


def test_default_logs_each_failed_attempt_and_its_retry(tmp_path: Path) -> None:
    err = worker(tmp_path).stderr
    warnings = [ln for ln in err.splitlines() if " WARNING errands.worker: " in ln]
    assert len(warnings) == 2, err
    first, last = warnings
    assert "job 1 flaky attempt 1/2 failed after" in first
    assert "UPSTREAM:DOWN: upstream refused 7; retry at " in first
    assert "job 1 flaky attempt 2/2 failed after" in last and "failed for good" in last
    assert "fine" not in "".join(warnings)  # successes are quiet by default
    assert err.startswith("errands worker: ") and "stopped: 1 succeeded" in err


def test_verbose_adds_starts_and_successes_with_durations(tmp_path: Path) -> None:
    err = worker(tmp_path, "--verbose").stderr
    assert "DEBUG errands.worker: job 2 fine attempt 1/20 started" in err
    assert "DEBUG errands.worker: job 2 fine attempt 1/20 succeeded in " in err
    assert "job 1 flaky attempt 1/2 started" in err and "job 1 flaky attempt 2/2 started" in err


def test_quiet_keeps_only_warnings(tmp_path: Path) -> None:
    err = worker(tmp_path, "--quiet").stderr
    assert [ln for ln in err.splitlines() if ln.strip()] == [
        ln for ln in err.splitlines() if " WARNING " in ln
    ]
    assert len(err.splitlines()) == 2


def test_json_lines_carry_the_fields(tmp_path: Path) -> None:
    err = worker(tmp_path, "--log-format", "json", "--verbose").stderr
    records = [json.loads(line) for line in err.splitlines()]  # every line is JSON
    by_event: dict[str, list[dict[str, Any]]] = {}
    for rec in records:
        assert {"ts", "level", "logger", "message"} <= rec.keys()
        by_event.setdefault(rec.get("event", ""), []).append(rec)
    (retry,) = by_event["retry_scheduled"]
    assert retry["job_id"] == 1 and retry["type"] == "flaky" and retry["level"] == "warning"
    assert (retry["attempt"], retry["max_attempts"]) == (1, 2)
    assert retry["error_code"] == "UPSTREAM:DOWN" and retry["error"] == "upstream refused 7"
    assert retry["next_run_at"].endswith("+00:00")
    (failed,) = by_event["failed"]
    assert (failed["attempt"], failed["error_code"]) == (2, "UPSTREAM:DOWN")
    (ok,) = by_event["succeeded"]
    assert ok["job_id"] == 2 and ok["duration"] >= 0
    assert len(by_event["started"]) == 3
    assert by_event["worker_started"] and by_event["worker_stopped"][0]["succeeded"] == 1


def test_applications_route_it_through_logging(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    with errands.Queue(db_url) as q:

        @q.task(max_attempts=1)
        def broken() -> None:
            raise ValueError("nope")

        q.enqueue("broken", {})
        with caplog.at_level(logging.WARNING, logger="errands"):
            q.run_worker(burst=True, concurrency=1)
    (rec,) = [r for r in caplog.records if r.name == "errands.worker"]
    assert rec.levelno == logging.WARNING
    fields = rec.errands  # type: ignore[attr-defined]
    assert fields["event"] == "failed" and fields["error_code"] == "INTERNAL:ValueError"


def test_rescues_and_fence_refusals_are_logged(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    with errands.Queue(db_url, lease_seconds=5) as q:
        q.enqueue("slow", {})
        now = q.clock()
        (job,) = q.backend.claim(ClaimRequest("gone", ["slow"], None, 1, 5), now)
        with caplog.at_level(logging.WARNING, logger="errands"):
            Rescuer(q.backend, 5).run_once(now + 10)
        (rescue,) = [r for r in caplog.records if r.name == "errands.maintenance"]
        assert f"job {job.id} rescued" in rescue.getMessage()
        assert rescue.errands["event"] == "rescued"  # type: ignore[attr-defined]
        # The stale attempt's outcome is refused by the fence, and the worker logs it.
        from errands.worker import log as worker_log

        applied = q.backend.finish([Succeeded(job.id, 1, now, None)], "gone", now + 11)
        assert applied == [False]

        class Slot:
            pass

        slot = Slot()
        slot.job = job  # type: ignore[attr-defined]
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="errands"):
            stale = Succeeded(job.id, 1, now, None)
            worker_log.outcomes([(slot, stale, 0.5)], [stale], applied, "w", now)
        (refused,) = caplog.records
        assert "refused by the fence" in refused.getMessage()
        assert refused.errands["event"] == "refused"  # type: ignore[attr-defined]


def test_a_retry_past_the_deadline_is_logged_as_the_failure_it_became(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    # docs/flow-control.md, "A deadline over all attempts": the retry would start 2 h in,
    # past the 1 h deadline, so the job fails at once — the log says so, not "retry at".
    with errands.Queue(db_url) as q:

        @q.task(deadline=3600, max_attempts=5, backoff=errands.fixed(7200))
        def settle(order: int) -> None:
            raise errands.JobError("PSP:DOWN", "the payment provider did not answer", retry=True)

        job_id = q.enqueue("settle", {"order": 42})
        with caplog.at_level(logging.WARNING, logger="errands"):
            summary = q.run_worker(burst=True, concurrency=1)
        job = q.get(job_id)
        assert job is not None and job.error_code == "DEADLINE:EXCEEDED"
    (rec,) = [r for r in caplog.records if r.name == "errands.worker"]
    message = rec.getMessage()
    assert "retry at" not in message
    assert f"job {job_id} settle attempt 1/5 failed" in message
    assert "DEADLINE:EXCEEDED" in message and "failed for good" in message
    fields = rec.errands  # type: ignore[attr-defined]
    assert fields["event"] == "failed" and fields["error_code"] == "DEADLINE:EXCEEDED"
    assert "next_run_at" not in fields and "PSP:DOWN" in fields["error"]
    assert (summary.failed, summary.retried) == (1, 0)
