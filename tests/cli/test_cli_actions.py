"""``errands delete``, ``run-now`` and ``priority`` (issue #25): in process, on both backends,
and once as a real subprocess."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import errands
from errands.cli import main
from errands.cli.common import cli_actor
from helpers.support import claim, event_names, get_job, run_cli


def _jobs(db_url: str) -> tuple[errands.Queue, int, int, int]:
    q = errands.Queue(db_url)
    later = q.enqueue("t", {}, delay=3600)
    due = q.enqueue("t", {})
    running = q.enqueue("r", {})
    claim(q, ["r"])
    return q, later, due, running


def test_run_now_priority_and_delete_report_each_id(
    db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    q, later, due, running = _jobs(db_url)
    with q:
        assert main(["--db", db_url, "run-now", str(later), str(due)]) == 1
        out, err = capsys.readouterr()
        assert f"job {later}: due now" in out
        assert f"errands: job {due}: already due" in err
        assert event_names(q, later)[-1] == "RESCHEDULED"
        assert q.events(later)[-1].actor == cli_actor()

        assert main(["--db", db_url, "priority", "9", str(later), str(due), "--json"]) == 0
        assert json.loads(capsys.readouterr().out) == {"changed": [later, due], "refused": {}}
        assert get_job(q, due).priority == 9

        assert main(["--db", db_url, "delete", str(due), str(running), "--json"]) == 1
        body = json.loads(capsys.readouterr().out)
        assert body["changed"] == [due]
        assert "cancel it first" in body["refused"][str(running)]
        assert q.get(due) is None and get_job(q, running).status == "running"


@pytest.mark.parametrize(
    "argv",
    [
        ["priority", str(2**31), "1"],
        ["priority", "x", "1"],
        ["priority", "1"],
        ["delete"],
        ["delete", "0"],
        ["run-now", "-5"],
        ["run-now", str(2**63)],
    ],
)
def test_bad_usage_is_exit_2_and_changes_nothing(
    db_url: str, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    q, later, _, _ = _jobs(db_url)
    with q:
        with pytest.raises(SystemExit) as stop:
            main(["--db", db_url, *argv])
        assert stop.value.code == 2
        assert get_job(q, later).priority == 0 and event_names(q, later) == ["ENQUEUED"]


def test_delete_as_a_subprocess(tmp_path: Path) -> None:
    db = str(tmp_path / "jobs.db")
    with errands.Queue(db) as q:
        job_id = q.enqueue("t", {})
    done = run_cli(tmp_path, "--db", db, "delete", str(job_id), "999")
    assert done.returncode == 1, done.stderr
    assert done.stdout == f"job {job_id}: deleted\n"
    assert done.stderr == "errands: job 999: no such job\n"
    with errands.Queue(db) as q:
        assert q.get(job_id) is None
