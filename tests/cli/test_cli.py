"""The ``errands`` command line, run as a real subprocess on real SQLite files."""

from __future__ import annotations

import dataclasses
import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import errands
from errands import Job
from errands.cli.common import cli_actor
from errands.core.states import State

TIMEOUT = 120  # seconds: a bound for a hung command, never a performance assertion
JOB_COLUMNS = {f.name for f in dataclasses.fields(Job)}
STATES = {s.value for s in State}


def run(
    cwd: Path, *args: str, env: dict[str, str] | None = None, timeout: float = TIMEOUT
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k != "ERRANDS_DB"}
    # -W error: a ResourceWarning (an unclosed database) in the CLI fails the test.
    return subprocess.run(
        [sys.executable, "-W", "error", "-m", "errands", *args],
        cwd=cwd,
        env={**base, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def ok(cwd: Path, *args: str, **kw: Any) -> str:
    r = run(cwd, *args, **kw)
    assert r.returncode == 0, f"errands {' '.join(args)} → {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r.stdout


def js(cwd: Path, *args: str, **kw: Any) -> Any:
    return json.loads(ok(cwd, *args, "--json", **kw))


def assert_one_line_error(r: subprocess.CompletedProcess[str], code: int, *words: str) -> None:
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("errands: "), r.stderr
    for word in words:
        assert word in last, (word, last)


# -- help and usage -------------------------------------------------------------------------

COMMANDS = ["worker", "enqueue", "jobs", "show", "retry", "cancel", "stats", "demo", "bench"]


def test_help_lists_every_command(tmp_path: Path) -> None:
    out = ok(tmp_path, "--help")
    for command in COMMANDS:
        assert f"\n    {command} " in out, command


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help(tmp_path: Path, command: str) -> None:
    assert "usage: errands " + command in ok(tmp_path, command, "--help")


def test_bad_usage_exits_2(tmp_path: Path) -> None:
    assert run(tmp_path).returncode == 2
    assert run(tmp_path, "nonsense").returncode == 2
    assert run(tmp_path, "jobs", "--status", "exploded").returncode == 2
    assert run(tmp_path, "jobs", "--limit", "0").returncode == 2
    assert run(tmp_path, "show", "not-a-number").returncode == 2
    assert run(tmp_path, "retry").returncode == 2


def test_enqueue_refuses_bad_json_and_writes_nothing(tmp_path: Path) -> None:
    db = str(tmp_path / "q.db")
    ok(tmp_path, "--db", db, "enqueue", "first", "--create")
    for bad in ["{not json", "NaN", '{"x": Infinity}']:
        r = run(tmp_path, "--db", db, "enqueue", "send", "--payload", bad)
        assert_one_line_error(r, 2, "--payload", "JSON")
    assert [j["type"] for j in js(tmp_path, "--db", db, "jobs")] == ["first"]


# -- enqueue → jobs → show → cancel → retry -------------------------------------------------


def test_job_lifecycle_through_the_cli(tmp_path: Path) -> None:
    env = {"ERRANDS_DB": str(tmp_path / "env.db")}
    first = int(
        ok(tmp_path, "enqueue", "send_email", "--payload", '{"to": "a@b.c"}', "--create", env=env)
    )
    second = js(
        tmp_path,
        "enqueue",
        "report",
        "--queue",
        "reports",
        "--priority",
        "5",
        "--delay",
        "60",
        "--max-attempts",
        "3",
        "--unique-key",
        "daily",
        env=env,
    )["id"]
    assert second > first
    # The same unique key while the first holder is queued: the existing id, nothing new.
    again = js(tmp_path, "enqueue", "report", "--unique-key", "daily", env=env)
    assert again == {"id": second}

    jobs = js(tmp_path, "jobs", env=env)
    assert [j["id"] for j in jobs] == [second, first]
    for job in jobs:
        assert set(job) == JOB_COLUMNS
    by_id = {j["id"]: j for j in jobs}
    assert by_id[first]["payload"] == {"to": "a@b.c"}
    assert by_id[second]["queue"] == "reports"
    assert by_id[second]["priority"] == 5
    assert by_id[second]["max_attempts"] == 3
    assert by_id[second]["status"] == "queued"
    assert [j["id"] for j in js(tmp_path, "jobs", "--queue", "reports", env=env)] == [second]
    assert [j["id"] for j in js(tmp_path, "jobs", "--type", "send_email", env=env)] == [first]
    assert len(js(tmp_path, "jobs", "--limit", "1", env=env)) == 1
    assert "send_email" in ok(tmp_path, "jobs", env=env)

    out = ok(tmp_path, "cancel", str(first), env=env)
    assert f"job {first}: cancelled" in out
    shown = js(tmp_path, "show", str(first), env=env)
    assert set(shown) == {"job", "attempts", "events", "deps", "steps"}
    assert shown["job"]["status"] == "cancelled"
    assert [e["event"] for e in shown["events"]] == ["ENQUEUED", "CANCELLED"]
    assert [e["actor"] for e in shown["events"]] == [cli_actor(), cli_actor()]
    assert "CANCELLED" in ok(tmp_path, "show", str(first), env=env)

    # Cancelling it again is refused (exit 1), and so is a missing id; the valid id in the
    # same call is still cancelled.
    r = run(tmp_path, "cancel", str(first), str(second), "999", env=env)
    assert r.returncode == 1
    assert f"job {second}: cancelled" in r.stdout
    assert "no job with id 999" in r.stderr and f"job {first} is cancelled" in r.stderr
    assert "Traceback" not in r.stderr

    ok(tmp_path, "retry", str(first), env=env)
    shown = js(tmp_path, "show", str(first), env=env)
    assert shown["job"]["status"] == "queued"
    assert shown["events"][-1]["event"] == "RETRIED"
    assert_one_line_error(
        run(tmp_path, "retry", str(first), env=env), 1, "only failed or cancelled"
    )

    out = ok(tmp_path, "retry", "--status", "cancelled", "--yes", env=env)
    assert "1 cancelled job(s) match" in out and "1 retried" in out
    stats = js(tmp_path, "stats", env=env)
    assert set(stats["counts"]) == STATES
    assert stats["counts"]["queued"] == 2
    assert sum(stats["counts"].values()) == 2
    assert "queued" in ok(tmp_path, "stats", env=env)


def test_db_flag_before_or_after_the_command(tmp_path: Path) -> None:
    db = str(tmp_path / "flags.db")
    ok(tmp_path, "enqueue", "a", "--db", db, "--create")
    ok(tmp_path, "--db", db, "enqueue", "b")
    assert len(js(tmp_path, "jobs", "--db", db)) == 2
    assert not (tmp_path / "errands.db").exists()


def test_reading_commands_refuse_a_missing_database(tmp_path: Path) -> None:
    for args in (["jobs"], ["show", "1"], ["stats"], ["cancel", "1"]):
        assert_one_line_error(run(tmp_path, *args), 1, "no queue database at")
    assert not (tmp_path / "errands.db").exists()


def test_show_missing_job_exits_1(tmp_path: Path) -> None:
    ok(tmp_path, "enqueue", "x", "--create")
    assert_one_line_error(run(tmp_path, "show", "42"), 1, "no job with id 42")


def test_database_problem_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "junk.db").write_bytes(b"this is not a sqlite database at all" * 100)
    r = run(tmp_path, "--db", "junk.db", "jobs")
    assert_one_line_error(r, 1, "junk.db")


# -- worker ---------------------------------------------------------------------------------


def write_app(tmp_path: Path, name: str, db: Path, extra: str = "") -> None:
    source = f"""
        import errands

        q = errands.Queue({str(db)!r})

        @q.task
        def add(a: int, b: int) -> int:
            return a + b

        @q.task(max_attempts=2, backoff=errands.fixed(0))
        def explode() -> None:
            raise errands.JobError("DEMO:BOOM", "it always explodes")
        """
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(source) + textwrap.dedent(extra))


def test_worker_burst_runs_jobs_from_the_users_app(tmp_path: Path) -> None:
    db = tmp_path / "app.db"
    write_app(tmp_path, "myapp", db)
    ids = [
        js(
            tmp_path,
            "--db",
            str(db),
            "enqueue",
            "add",
            "--create",
            "--payload",
            json.dumps({"a": i, "b": 1}),
        )["id"]
        for i in range(5)
    ]
    # The CLI's Queue has no tasks, so the task's max_attempts is not known at enqueue time.
    bad = int(ok(tmp_path, "--db", str(db), "enqueue", "explode", "--max-attempts", "2"))
    summary = js(tmp_path, "worker", "--app", "myapp", "--burst", "--concurrency", "2")
    assert summary["succeeded"] == 5
    assert summary["failed"] == 1
    done = js(tmp_path, "--db", str(db), "jobs", "--status", "succeeded")
    assert sorted(j["id"] for j in done) == sorted(ids)
    assert {j["id"]: j["result"] for j in done} == {ids[i]: i + 1 for i in range(5)}
    shown = js(tmp_path, "--db", str(db), "show", str(bad))
    assert shown["job"]["status"] == "failed"
    assert [a["error_code"] for a in shown["attempts"]] == ["DEMO:BOOM", "DEMO:BOOM"]
    failed = js(tmp_path, "--db", str(db), "jobs", "--error-code", "DEMO:BOOM")
    assert [j["id"] for j in failed] == [bad]
    # The same with an explicit ATTR, --queues, and a --db that agrees with the app.
    ok(tmp_path, "--db", str(db), "enqueue", "add", "--payload", '{"a": 1, "b": 2}')
    summary = js(
        tmp_path, "worker", "--app", "myapp:q", "--burst", "--queues", "default", "--db", str(db)
    )
    assert summary["succeeded"] == 1


def test_worker_app_errors(tmp_path: Path) -> None:
    db = tmp_path / "app.db"
    write_app(tmp_path, "one", db)
    write_app(tmp_path, "two", db, "\nother = errands.Queue(q.url)\n")
    (tmp_path / "none.py").write_text("x = 1\n")
    (tmp_path / "broken.py").write_text("raise RuntimeError('bad config in my app')\n")
    assert_one_line_error(run(tmp_path, "worker", "--app", "missing_mod"), 1, "missing_mod")
    assert_one_line_error(run(tmp_path, "worker", "--app", "none"), 1, "no errands.Queue")
    assert_one_line_error(run(tmp_path, "worker", "--app", "two"), 1, "several Queues")
    assert_one_line_error(run(tmp_path, "worker", "--app", "one:nope"), 1, "no attribute")
    assert_one_line_error(run(tmp_path, "worker", "--app", "one:add"), 1, "not an errands.Queue")
    r = run(tmp_path, "worker", "--app", "broken")
    assert r.returncode == 1 and "bad config in my app" in r.stderr
    errands.Queue(str(tmp_path / "other.db")).close()  # a missing one is refused before
    r = run(tmp_path, "worker", "--app", "one", "--burst", "--db", str(tmp_path / "other.db"))
    assert_one_line_error(r, 2, "differs")
    assert run(tmp_path, "worker", "--app", "one:", "--burst").returncode == 2
    assert run(tmp_path, "worker").returncode == 2


# -- demo -------------------------------------------------------------------------------


def test_demo_runs_and_leaves_a_database_to_explore(tmp_path: Path) -> None:
    r = run(tmp_path, "demo", timeout=90)
    assert r.returncode == 0, r.stderr
    assert "Explore further" in r.stdout
    assert "PAYMENT:CARD_DECLINED" in r.stdout
    db = str(tmp_path / "errands-demo.db")
    stats = js(tmp_path, "--db", db, "stats")
    counts = stats["counts"]
    assert counts["queued"] == counts["running"] == 0
    assert counts["failed"] == 1 and counts["cancelled"] == 1
    assert counts["succeeded"] >= 250
    (failed,) = js(tmp_path, "--db", db, "jobs", "--status", "failed")
    shown = js(tmp_path, "--db", db, "show", str(failed["id"]))
    assert len(shown["attempts"]) == failed["max_attempts"]
    # A second run replaces the demo file rather than adding to it.
    ok(tmp_path, "demo", "--jobs", "50", timeout=90)
    assert sum(js(tmp_path, "--db", db, "stats")["counts"].values()) < 100


def test_demo_never_replaces_a_database_that_is_not_a_demo(tmp_path: Path) -> None:
    precious = tmp_path / "app.db"
    conn = sqlite3.connect(precious)
    conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY)")
    conn.commit()
    conn.close()
    before = precious.read_bytes()
    assert_one_line_error(run(tmp_path, "demo", "--db", str(precious)), 1, "not an errands demo")
    assert precious.read_bytes() == before
