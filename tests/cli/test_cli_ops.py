"""The operator commands, run as ``main([...])`` in process and as real subprocesses."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from typing import Any

import pytest

import errands
from errands.cli import main
from errands.cli.common import cli_actor, duration
from helpers.ops import DAY, enqueue, register_worker, run_job, vacuum_runs
from helpers.support import FixedClock, get_job


@pytest.fixture
def now() -> float:
    # The CLI reads the real clock: build the database relative to it.
    return float(int(time.time()))


@pytest.fixture
def built(db_url: str, now: float) -> dict[str, Any]:
    with errands.Queue(db_url, clock=FixedClock(now)) as q:
        failed = [
            run_job(
                q,
                "mail",
                run_at=now - 300,
                started=now - 290,
                finished=now - 280 + i,
                outcome="failed",
                error_code="SMTP:REJECTED" if i < 3 else "SMTP:TIMEOUT",
            )
            for i in range(4)
        ]
        other = run_job(
            q, "pay", run_at=now - 300, started=now - 290, finished=now - 280, outcome="failed"
        )
        ok = run_job(q, "mail", run_at=now - 300, started=now - 290, finished=now - 285)
        old = run_job(
            q, "mail", run_at=now - 40 * DAY, started=now - 40 * DAY, finished=now - 40 * DAY + 1
        )
        queued = [enqueue(q, "later", at=now, run_at=now + 3600) for _ in range(3)]
    return {"failed": failed, "other": other, "ok": ok, "old": old, "queued": queued}


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_stats_json_counts_every_state(
    db_url: str, built: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _run(["stats", "--db", db_url, "--json"], capsys)
    assert code == 0
    data = json.loads(out)
    assert data["counts"] == {
        "waiting": 0, "queued": 3, "running": 0, "succeeded": 2, "failed": 5, "cancelled": 0,
    }  # fmt: skip
    assert data["top_errors"][0] == {
        "error_code": "SMTP:REJECTED",
        "type": "mail",
        "count": 3,
        "last_seen": data["top_errors"][0]["last_seen"],
    }


def test_stats_screen(
    db_url: str, built: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _run(["stats", "--db", db_url], capsys)
    assert code == 0
    assert "queued 3" in out and "SMTP:REJECTED" in out and "last hour 6 finished" in out
    assert "UNHANDLED default/later" in out


def test_errors_top_and_since(
    db_url: str, built: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _run(["errors", "--db", db_url, "--top", "2", "--since", "1h", "--json"], capsys)
    assert code == 0
    assert [(e["error_code"], e["count"]) for e in json.loads(out)] == [
        ("SMTP:REJECTED", 3),
        ("APP:BROKEN", 1),
    ]


def test_bulk_retry_asks_and_can_be_declined(
    db_url: str, built: dict[str, Any], capsys: pytest.CaptureFixture[str], monkeypatch: Any
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("n\n"))
    code, out, err = _run(["retry", "--db", db_url, "--status", "failed", "--type", "mail"], capsys)
    assert code == 1 and "4 failed job(s) match" in out and "nothing changed" in err
    with errands.Queue(db_url) as q:
        assert len(q.jobs(status="failed")) == 5


def test_bulk_retry_by_error_code_writes_cli_events(
    db_url: str, built: dict[str, Any], capsys: pytest.CaptureFixture[str], monkeypatch: Any
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("y\n"))
    argv = ["retry", "--db", db_url, "--status", "failed", "--error-code", "SMTP:REJECTED"]
    code, out, _ = _run(argv, capsys)
    assert code == 0 and "3 retried" in out
    with errands.Queue(db_url) as q:
        for job_id in built["failed"][:3]:
            job = q.get(job_id)
            assert job is not None and job.status == "queued"
            assert q.events(job_id)[-1].event == "RETRIED"
            assert q.events(job_id)[-1].actor == cli_actor()
        assert get_job(q, built["failed"][3]).status == "failed"


def test_bulk_cancel_with_yes(
    db_url: str, built: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["cancel", "--db", db_url, "--status", "queued", "--type", "later", "--yes"]
    code, out, _ = _run(argv, capsys)
    assert code == 0 and "3 queued job(s) match" in out and "3 cancelled" in out
    with errands.Queue(db_url) as q:
        for job_id in built["queued"]:
            assert get_job(q, job_id).status == "cancelled"
            assert [(e.event, e.actor) for e in q.events(job_id)][-1] == ("CANCELLED", cli_actor())


def test_retry_by_ids_needs_no_confirmation(
    db_url: str, built: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _run(["retry", "--db", db_url, str(built["other"])], capsys)
    assert code == 0 and f"job {built['other']}: queued to run again" in out


def test_bulk_usage_errors(
    db_url: str, built: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run(["retry", "--db", db_url], capsys)[0] == 2
    with pytest.raises(SystemExit) as exc:
        main(["retry", "--db", db_url, "--status", "running"])
    assert exc.value.code == 2


def test_prune_dry_run_then_prune(
    db_url: str, built: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _run(["prune", "--db", db_url, "--dry-run", "--json"], capsys)
    assert code == 0 and json.loads(out)["deleted"] == {"succeeded": 1, "failed": 0, "cancelled": 0}
    code, out, _ = _run(["prune", "--db", db_url], capsys)
    assert code == 0 and "deleted 1 job(s)" in out
    with errands.Queue(db_url) as q:
        assert q.get(built["old"]) is None
    code, out, _ = _run(["vacuum", "--db", db_url], capsys)
    assert code == 0 and "vacuumed" in out


def test_check_ok_and_problems(db_url: str, now: float, capsys: pytest.CaptureFixture[str]) -> None:
    with errands.Queue(db_url, clock=FixedClock(now)) as q:
        run_job(q, "ok", run_at=now - 10, started=now - 9, finished=now - 8)
        vacuum_runs(q)  # or check says autovacuum is off (CI's PostgreSQL) and nothing vacuums
    assert _run(["check", "--db", db_url], capsys)[:2] == (0, "ok\n")
    with errands.Queue(db_url, clock=FixedClock(now)) as q:
        enqueue(q, "stuck", at=now - 900)
        for i in range(12):
            run_job(
                q, f"f{i}", run_at=now - 60, started=now - 50, finished=now - 40, outcome="failed"
            )
        run_job(q, "lost", run_at=now - 600, started=now - 500, finished=None, outcome="running")
        q.periodic(every=60, name="beat")(lambda: None)
    code, out, _ = _run(["check", "--db", db_url, "--max-wait", "5m", "--json"], capsys)
    assert code == 1
    problems = json.loads(out)["problems"]
    assert len(problems) == 4
    assert "past their lease" in problems[0]
    assert "oldest due job" in problems[1] and "stuck" in problems[1]
    assert "no live worker handles type 'stuck'" in problems[2]
    assert "failure rate" in problems[3]


def test_periodic_listing(db_url: str, now: float, capsys: pytest.CaptureFixture[str]) -> None:
    with errands.Queue(db_url, clock=FixedClock(now - 7200)) as q:
        q.periodic(every=60, name="beat", grace=60)(lambda: None)
        q.periodic(cron="0 9 * * *", name="daily", timezone="Europe/Paris")(lambda: None)
    code, out, _ = _run(["periodic", "--db", db_url, "--json"], capsys)
    assert code == 0
    rows = {r["name"]: r for r in json.loads(out)}
    assert rows["beat"]["overdue"] is True and rows["beat"]["every_seconds"] == 60
    assert rows["daily"]["cron"] == "0 9 * * *" and rows["daily"]["timezone"] == "Europe/Paris"
    code, out, _ = _run(["check", "--db", db_url], capsys)
    assert code == 1 and "periodic 'beat' overdue" in out
    code, out, _ = _run(["periodic", "--db", db_url], capsys)
    assert "OVERDUE" in out


def test_missing_database_is_not_created(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    missing = str(tmp_path / "nope.db")
    code, _, err = _run(["stats", "--db", missing], capsys)
    assert code == 1 and "no queue database at" in err and not os.path.exists(missing)


def test_duration_parser() -> None:
    assert duration("90") == 90 and duration("30m") == 1800 and duration("24h") == 86400
    assert duration("7d") == 7 * 86400
    with pytest.raises(Exception, match="not a duration"):
        duration("soon")


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "errands", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
        check=False,
    )


def test_metrics_and_check_as_subprocesses(db_url: str, built: dict[str, Any]) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    proc = _cli("metrics", env={"ERRANDS_DB": db_url})
    assert proc.returncode == 0, proc.stderr
    names = {f.name for f in text_string_to_metric_families(proc.stdout)}
    assert {"errands_jobs", "errands_jobs_finished", "errands_job_wait_seconds"} <= names
    proc = _cli("check", "--db", db_url)
    assert proc.returncode == 1 and "no live worker handles type 'later'" in proc.stdout
    with errands.Queue(db_url) as q:  # a live worker that runs them: nothing to report
        register_worker(q, "w-later", at=time.time(), types=["later"])
        vacuum_runs(q, "w-later")  # its vacuum service (CI's PostgreSQL has autovacuum off)
    proc = _cli("check", "--db", db_url)
    assert proc.returncode == 0 and proc.stdout == "ok\n"
    proc = _cli("stats", "--bogus")
    assert proc.returncode == 2
