"""The operator activity log from the command line (docs/operations.md, "The activity log"),
on both backends: every command that changes the queue leaves exactly one row whose actor is
``cli:<user>``, and ``errands activity`` reads the log back."""

from __future__ import annotations

import argparse
import json
from typing import Any

import pytest

import errands
from errands.cli import build_parser, main
from helpers.ops import HOUR

USER = "zoe"  # getpass.getuser() reads $LOGNAME first
ACTOR = f"cli:{USER}"


def world(db_url: str) -> dict[str, Any]:
    with errands.Queue(db_url) as q:

        @q.task
        def work(n: int) -> None: ...

        @q.periodic(every=HOUR)
        def hourly() -> None: ...

        cancelled = work.enqueue(n=0)
        q.cancel(cancelled, actor="setup")
        later = q.enqueue("work", {"n": 1}, delay=HOUR)
        queued = work.enqueue(n=2)
        q.pause("paused", actor="setup")
        q.set_limit("k", running=1, actor="setup")
    return {"cancelled": cancelled, "later": later, "queued": queued}


# Each command that changes the queue, its arguments and the action its row names; a command
# added to the CLI must be here, in READS, or in NOT_LOGGED (see the first test).
CHANGES: dict[str, tuple[list[str], str]] = {
    "enqueue": (["enqueue", "work", "--payload", '{{"n": 5}}'], "enqueue"),
    "retry": (["retry", "{cancelled}"], "retry"),
    "retry --status": (["retry", "--status", "cancelled", "--yes"], "retry"),
    "cancel": (["cancel", "{queued}"], "cancel"),
    "cancel --status": (["cancel", "--status", "queued", "--yes"], "cancel"),
    "delete": (["delete", "{cancelled}"], "delete"),
    "run-now": (["run-now", "{later}"], "run_now"),
    "priority": (["priority", "7", "{later}"], "priority"),
    "signal": (["signal", "{queued}", "go"], "signal"),
    "pause": (["pause", "default", "--reason", "deploy"], "pause"),
    "resume": (["resume", "paused"], "resume"),
    "limit set": (["limit", "set", "k", "--running", "4"], "set_limit"),
    "limit clear": (["limit", "clear", "k"], "clear_limit"),
    "periodic disable": (["periodic", "disable", "hourly"], "periodic_disable"),
    "periodic enable": (["periodic", "enable", "hourly"], "periodic_enable"),
    "periodic run": (["periodic", "run", "hourly"], "periodic_run"),
    "periodic remove": (["periodic", "remove", "hourly"], "periodic_remove"),
    "prune": (["prune"], "prune"),
}
READS = {
    "activity",
    "jobs",
    "show",
    "deps",
    "stats",
    "errors",
    "queues",
    "limits",
    "metrics",
    "check",
    "periodic",  # without a verb: the list (its verbs are above)
    "fair",
}
# Commands that change no job, queue, limit or schedule an operator sees, or run the queue:
# the worker, the dashboard (its own mutations are logged under their actor), a throwaway
# demo database, the benchmark, vacuum (space only), and graduate/reopen, which move the
# whole database and keep their own mark (q.graduation()).
NOT_LOGGED = {"worker", "dashboard", "demo", "bench", "vacuum", "graduate", "reopen"}


def test_every_command_is_logged_read_only_or_said_not_to_be() -> None:
    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    commands = set(sub.choices)
    logged = {name.split()[0] for name in CHANGES}
    assert commands - logged - READS - NOT_LOGGED == set(), "classify these commands"
    assert logged | READS | NOT_LOGGED <= commands


@pytest.mark.parametrize("case", sorted(CHANGES))
def test_each_changing_command_leaves_one_row_as_cli_user(
    db_url: str, case: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LOGNAME", USER)
    w = world(db_url)
    argv, action = CHANGES[case]
    with errands.Queue(db_url) as q:
        before = len(q.activity(limit=1000))
    assert main(["--db", db_url, *(a.format(**w) for a in argv)]) == 0, capsys.readouterr()
    with errands.Queue(db_url) as q:
        rows = q.activity(limit=1000)
    assert len(rows) == before + 1
    assert (rows[0].actor, rows[0].action) == (ACTOR, action)


def test_job_events_from_the_cli_name_the_user(
    db_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LOGNAME", USER)
    w = world(db_url)
    assert main(["--db", db_url, "retry", str(w["cancelled"])]) == 0
    with errands.Queue(db_url) as q:
        assert q.events(w["cancelled"])[-1].actor == ACTOR


def test_a_bulk_command_records_its_filter(
    db_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LOGNAME", USER)
    world(db_url)
    argv = ["cancel", "--status", "queued", "--type", "work", "--yes"]
    assert main(["--db", db_url, *argv]) == 0
    with errands.Queue(db_url) as q:
        (row,) = q.activity(action="cancel", actor=ACTOR)
    assert row.filter == {"status": "queued", "type": "work"}
    assert row.count == 2  # the queued job and the one due later


def test_errands_activity_lists_filters_and_prints_json(
    db_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LOGNAME", USER)
    world(db_url)
    main(["--db", db_url, "pause", "default"])
    capsys.readouterr()
    assert main(["--db", db_url, "activity"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["ID", "TIME", "(UTC)", "ACTOR", "ACTION", "TARGET", "COUNT", "FILTER"]
    assert ACTOR in out[1] and "pause" in out[1] and "default" in out[1]
    assert "setup" in out[-1]  # oldest last
    assert main(["--db", db_url, "activity", "--actor", ACTOR, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["actor"], r["action"], r["target"]) for r in rows] == [(ACTOR, "pause", "default")]
    assert main(["--db", db_url, "activity", "--action", "nothing"]) == 0
    assert "no operator action" in capsys.readouterr().out
    assert main(["--db", db_url, "activity", "--limit", "1", "--before", str(rows[0]["id"])]) == 0
    assert "setup" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:
        main(["--db", db_url, "activity", "--limit", "0"])
    assert exc.value.code == 2


def test_graduate_carries_the_activity_log(tmp_path: Any, pg_empty_url: str) -> None:
    from errands.cli.graduate.copy import graduate

    path = tmp_path / "app.db"
    with errands.Queue(str(path)) as q:
        q.pause("emails", reason="smtp down", actor="alice")
        q.act("cancel", [q.enqueue("t", {})], actor="bob", selected_by={"status": "queued"})
        before = [r.to_dict() for r in q.activity()]
    assert graduate(str(path), pg_empty_url).ok
    with errands.Queue(pg_empty_url) as q:
        assert [r.to_dict() for r in q.activity()] == before
        q.resume("emails", actor="carol")  # the identity goes on after the copied rows
        assert [r.actor for r in q.activity()] == ["carol", "bob", "alice"]


def test_errands_dashboard_takes_labelled_tokens_from_the_environment(
    db_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from starlette.testclient import TestClient

    from errands.cli.dashboard import labelled_tokens
    from errands.web.server import build

    tokens = labelled_tokens("alice=tok-a1, deploy-bot=tok-b2\n")
    assert tokens == {"alice": "tok-a1", "deploy-bot": "tok-b2"}
    with errands.Queue(db_url) as q:
        app = build(q, host="0.0.0.0", token=tokens, read_only=False)
        with TestClient(app) as c:
            headers = {"authorization": "Bearer tok-b2", "content-type": "application/json"}
            assert c.post("/api/admin/queues/default/pause", json={}, headers=headers).is_success
        assert q.activity()[0].actor == "deploy-bot"
    # Malformed: bad usage (exit 2) before anything is served.
    monkeypatch.delenv("ERRANDS_DASHBOARD_TOKEN", raising=False)
    monkeypatch.setenv("ERRANDS_DASHBOARD_TOKENS", "alice:tok-a1")
    assert main(["--db", db_url, "dashboard", "--host", "0.0.0.0"]) == 2
    assert "LABEL=TOKEN" in capsys.readouterr().err
