"""Asking a running job to cancel is an audit event (issue #21, item 4): CANCEL_REQUESTED,
with who asked, on both backends; the docs list every event errands writes."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

import errands
from errands.cli import main
from errands.cli.common import cli_actor
from errands.core.states import Event
from helpers.support import claim, event_names

ROOT = Path(__file__).resolve().parents[2]


def test_cancel_of_a_running_job_records_who_asked(clocked_queue: errands.Queue) -> None:
    job_id = clocked_queue.enqueue("t", {})
    claim(clocked_queue, ["t"])
    assert clocked_queue.cancel(job_id, actor="alice") == "cancel_requested"
    assert event_names(clocked_queue, job_id) == ["ENQUEUED", "CLAIMED", "CANCEL_REQUESTED"]
    last = clocked_queue.events(job_id)[-1]
    assert (last.event, last.actor) == ("CANCEL_REQUESTED", "alice")


def test_cancel_from_the_cli_records_the_cli_as_actor(
    db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with errands.Queue(db_url) as q:
        job_id = q.enqueue("t", {})
        claim(q, ["t"])
    assert main(["--db", db_url, "cancel", str(job_id)]) == 0
    capsys.readouterr()
    with errands.Queue(db_url) as q:
        last = q.events(job_id)[-1]
        assert (last.event, last.actor) == ("CANCEL_REQUESTED", cli_actor())
        job = q.get(job_id)
        assert job is not None and (job.status, job.cancel_requested) == ("running", True)


def test_a_queued_cancel_is_no_request(queue: errands.Queue) -> None:
    job_id = queue.enqueue("t", {})
    assert queue.cancel(job_id) == "cancelled"
    assert "CANCEL_REQUESTED" not in event_names(queue, job_id)


def test_the_audit_setting_can_leave_the_request_out(
    make_queue: Callable[..., errands.Queue],
) -> None:
    q = make_queue(audit=["ENQUEUED", "CLAIMED"])
    job_id = q.enqueue("t", {})
    claim(q, ["t"])
    q.cancel(job_id)
    assert event_names(q, job_id) == ["ENQUEUED", "CLAIMED"]


def test_states_md_lists_every_event() -> None:
    text = (ROOT / "docs" / "states.md").read_text()
    documented = set(re.findall(r"^\| `([A-Z_]+)` \|", text, re.M))
    assert {e.value for e in Event} <= documented
