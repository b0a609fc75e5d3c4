"""First contact: the traps a newcomer hit, each closed at its root and checked through the real
``errands`` command (a subprocess) on real SQLite files and a real PostgreSQL."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import textwrap
from pathlib import Path

import pytest

import errands
from errands.errors import DatabaseError
from helpers.ops import register_worker, vacuum_runs
from helpers.support import is_postgres
from helpers.support import run_cli as run


def error_line(r: subprocess.CompletedProcess[str], code: int, *words: str) -> str:
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("errands: "), r.stderr
    for word in words:
        assert word in last, (word, last)
    return last


def make_db(path: Path) -> Path:
    errands.Queue(str(path)).close()
    return path


APP = """
import errands

q = errands.Queue({url})


@q.task(max_attempts=2, backoff=errands.fixed(0))
def flaky(n: int) -> int:
    raise errands.JobError("UPSTREAM:DOWN", f"upstream refused {{n}}")


@q.task
def fine() -> str:
    return "ok"
"""


def write_app(tmp: Path, name: str, url: str | None) -> None:
    (tmp / f"{name}.py").write_text(
        textwrap.dedent(APP.format(url="" if url is None else repr(url)))
    )


# -- one database rule: ERRANDS_DB ---------------------------------------------------------


def test_queue_without_url_reads_errands_db(
    db_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("ERRANDS_DB", db_url)
    with errands.Queue() as q:
        assert q.url == db_url
    monkeypatch.delenv("ERRANDS_DB")
    monkeypatch.chdir(tmp_path)
    with errands.Queue() as q:
        assert q.url == "errands.db"
    assert (tmp_path / "errands.db").exists()


def test_worker_follows_errands_db_when_the_app_builds_queue_without_url(
    db_url: str, tmp_path: Path
) -> None:
    # The graduate trap: ERRANDS_DB=postgresql://… must move the worker, not leave it on a file.
    write_app(tmp_path, "app", None)
    with errands.Queue(db_url) as q:
        job_id = q.enqueue("fine", {})
    r = run(tmp_path, "worker", "--app", "app", "--burst", env={"ERRANDS_DB": db_url})
    assert r.returncode == 0, r.stderr
    with errands.Queue(db_url) as q:
        job = q.get(job_id)
        assert job is not None and job.status == "succeeded"
    assert not (tmp_path / "errands.db").exists()


def test_worker_refuses_when_errands_db_names_another_database(db_url: str, tmp_path: Path) -> None:
    write_app(tmp_path, "app", str(tmp_path / "app.db"))
    with errands.Queue(db_url) as q:
        job_id = q.enqueue("fine", {})
    r = run(tmp_path, "worker", "--app", "app", "--burst", env={"ERRANDS_DB": db_url})
    line = error_line(r, 2, "$ERRANDS_DB is", "but app's Queue uses", "app.db", "errands.Queue()")
    if is_postgres(db_url):
        assert "postgresql://" in line
    with errands.Queue(db_url) as q:  # the job is untouched, waiting for the right worker
        job = q.get(job_id)
        assert job is not None and job.status == "queued"


def test_worker_refuses_a_different_db_option(tmp_path: Path) -> None:
    write_app(tmp_path, "app", "app.db")
    make_db(tmp_path / "app.db")  # a missing file named by --db is refused before the app
    make_db(tmp_path / "other.db")  # is imported (tests/cli/test_cli_first_steps.py)
    r = run(tmp_path, "worker", "--app", "app", "--burst", "--db", "other.db")
    error_line(r, 2, "--db other.db differs", "app.db")
    # The same database named both ways is fine, and --db wins over ERRANDS_DB.
    r = run(
        tmp_path, "worker", "--app", "app", "--burst", "--db", "app.db", env={"ERRANDS_DB": "x.db"}
    )
    assert r.returncode == 0, r.stderr


def test_worker_help_states_the_rule(tmp_path: Path) -> None:
    out = " ".join(run(tmp_path, "worker", "--help").stdout.split())
    assert "errands.Queue() with no URL reads $ERRANDS_DB" in out
    assert "--db and $ERRANDS_DB, when set, must name that same database" in out
    assert "refuses to start" in out


# -- no database by accident; read commands never write -------------------------------------

READS = [
    ("jobs",),
    ("show", "1"),
    ("stats",),
    ("errors",),
    ("periodic",),
    ("check",),
    ("retry", "1"),
    ("cancel", "1"),
    ("prune", "--dry-run"),
]


@pytest.mark.parametrize("command", [("enqueue", "send_email"), *READS], ids=lambda c: c[0])
def test_no_command_creates_a_missing_database(tmp_path: Path, command: tuple[str, ...]) -> None:
    r = run(tmp_path, *command)
    error_line(r, 1, "no queue database at errands.db", "--db")
    r = run(tmp_path, "--db", "typo.db", *command)
    error_line(r, 1, "no queue database at typo.db (from --db)")
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_enqueue_create_is_the_explicit_way(tmp_path: Path) -> None:
    r = run(tmp_path, "--db", "new.db", "enqueue", "send_email", "--create")
    assert (r.returncode, r.stdout.strip()) == (0, "1"), r.stderr
    assert run(tmp_path, "--db", "new.db", "enqueue", "send_email").stdout.strip() == "2"


@pytest.mark.parametrize("command", READS, ids=lambda c: c[0])
def test_an_empty_file_is_not_turned_into_a_queue(tmp_path: Path, command: tuple[str, ...]) -> None:
    (tmp_path / "empty.db").write_bytes(b"")
    r = run(tmp_path, "--db", "empty.db", *command)
    error_line(r, 1, "empty.db (from --db) is an empty file, not an errands queue")
    assert (tmp_path / "empty.db").stat().st_size == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.db"]


def test_an_sqlite_database_without_errands_is_left_alone(tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE notes (body TEXT)")
    conn.commit()
    conn.close()
    before = other.read_bytes()
    error_line(run(tmp_path, "--db", "other.db", "jobs"), 1, "without an errands queue in it")
    assert other.read_bytes() == before


def test_directory_text_file_and_corruption_are_told_apart(tmp_path: Path) -> None:
    (tmp_path / "adir").mkdir()
    (tmp_path / "notes.txt").write_text("hello\n")
    corrupt = make_db(tmp_path / "corrupt.db")
    data = bytearray(corrupt.read_bytes())
    data[16:100] = b"\xff" * 84  # the header's page size and the rest: garbage
    corrupt.write_bytes(bytes(data))
    error_line(run(tmp_path, "--db", "adir", "jobs"), 1, "adir (from --db) is a directory")
    error_line(run(tmp_path, "--db", "notes.txt", "jobs"), 1, "is not an SQLite database")
    line = error_line(run(tmp_path, "--db", "corrupt.db", "jobs"), 1, "corrupt")
    assert "restore it from a backup" in line
    for name in ("adir", "notes.txt"):
        assert "restore" not in error_line(run(tmp_path, "--db", name, "jobs"), 1)


def test_queue_itself_tells_a_directory_and_a_text_file_from_corruption(tmp_path: Path) -> None:
    (tmp_path / "adir").mkdir()
    (tmp_path / "notes.txt").write_text("hello\n")
    with pytest.raises(DatabaseError, match="is a directory, not a database file"):
        errands.Queue(str(tmp_path / "adir"))
    with pytest.raises(DatabaseError, match="is not an SQLite database") as info:
        errands.Queue(str(tmp_path / "notes.txt"))
    assert "backup" not in str(info.value)
    assert (tmp_path / "notes.txt").read_text() == "hello\n"


def test_three_slashes_are_relative_and_the_message_says_so(tmp_path: Path) -> None:
    make_db(tmp_path / "abs.db")
    absolute = str(tmp_path / "abs.db")
    three = "sqlite:///" + absolute.lstrip("/")  # what people write meaning the absolute path
    line = error_line(run(tmp_path, "--db", three, "jobs"), 1, "three slashes", "four slashes")
    assert f"sqlite:///{absolute}" in line
    r = run(tmp_path, "--db", "sqlite:///" + absolute, "jobs")  # four slashes: absolute
    assert r.returncode == 0, r.stderr
    assert run(tmp_path, "--db", "sqlite:///abs.db", "jobs").returncode == 0  # relative


# -- the CLI refuses what workers would refuse ----------------------------------------------


@pytest.mark.parametrize("payload", ['["a"]', '"a string"', "1", "null", "true"])
def test_enqueue_refuses_a_payload_that_is_not_an_object(tmp_path: Path, payload: str) -> None:
    make_db(tmp_path / "app.db")
    r = run(tmp_path, "--db", "app.db", "enqueue", "send_email", "--payload", payload)
    error_line(r, 2, "pass a JSON object", "keyword arguments")
    with errands.Queue(str(tmp_path / "app.db")) as q:
        assert q.jobs() == []


def test_check_reports_a_type_no_live_worker_handles(db_url: str, tmp_path: Path) -> None:
    with errands.Queue(db_url) as q:
        q.enqueue("send_emial", {})
        register_worker(q, "w1", at=q.clock(), types=["send_email"])
    r = run(tmp_path, "--db", db_url, "check")
    assert r.returncode == 1, r.stderr
    assert "no live worker handles type 'send_emial'" in r.stdout
    r = run(tmp_path, "--db", db_url, "check", "--json")
    out = json.loads(r.stdout)
    assert r.returncode == 1 and out["ok"] is False
    assert any("send_emial" in p for p in out["problems"])
    with errands.Queue(db_url) as q:
        register_worker(q, "w2", at=q.clock(), types=["send_emial"])
        vacuum_runs(q, "w2")  # its vacuum service (CI's PostgreSQL has autovacuum off)
    r = run(tmp_path, "--db", db_url, "check")
    assert (r.returncode, r.stdout.strip()) == (0, "ok"), r.stdout


# -- messages that send people the right way ------------------------------------------------


def test_unknown_command_suggests_the_closest(tmp_path: Path) -> None:
    error_line(run(tmp_path, "jbos"), 2, "invalid choice: 'jbos'", "did you mean 'jobs'?")


def test_app_given_as_a_file_suggests_the_module(tmp_path: Path) -> None:
    error_line(run(tmp_path, "worker", "--app", "app.py"), 2, "use --app app ")
    error_line(run(tmp_path, "worker", "--app", "pkg/jobs.py:q"), 2, "use --app pkg.jobs:q")


@pytest.mark.parametrize("verb", ["retry", "cancel"])
def test_retry_and_cancel_with_nothing_say_what_to_pass(tmp_path: Path, verb: str) -> None:
    make_db(tmp_path / "app.db")
    line = error_line(run(tmp_path, "--db", "app.db", verb), 2, "job ids", "--status")
    assert "not both" not in line
    status = "failed" if verb == "retry" else "queued"
    error_line(run(tmp_path, "--db", "app.db", verb, "1", "--status", status), 2, "not both")


def test_graduate_messages(tmp_path: Path, pg_empty_url: str) -> None:
    make_db(tmp_path / "app.db")
    # A PostgreSQL --db: graduate copies *from* SQLite.
    line = error_line(run(tmp_path, "graduate", "--db", pg_empty_url, "--to", pg_empty_url), 2)
    assert "PostgreSQL URL" in line and "--db app.db" in line and "does not exist" not in line
    error_line(run(tmp_path, "graduate", "--db", "app.db", "--to", "app2.db"), 2, "postgresql://")
    # A target database that does not exist: say how to create it.
    missing = pg_empty_url.rsplit("/", 1)[0] + "/errands_no_such_db"
    line = error_line(run(tmp_path, "graduate", "--db", "app.db", "--to", missing), 1)
    assert "createdb errands_no_such_db" in line
    # Success: the last line is a URL to paste, with the password hidden.
    scheme, rest = pg_empty_url.split("://", 1)
    creds, host = rest.rsplit("@", 1) if "@" in rest else ("postgres", rest)
    with_password = f"{scheme}://{creds.split(':')[0]}:s3cret@{host}"
    r = run(tmp_path, "graduate", "--db", "app.db", "--to", with_password)
    assert r.returncode == 0, r.stderr
    assert "s3cret" not in r.stdout + r.stderr
    last = r.stdout.strip().splitlines()[-1]
    assert f"{scheme}://{creds.split(':')[0]}:***@{host}" in last


def test_every_error_line_starts_with_errands(tmp_path: Path) -> None:
    make_db(tmp_path / "app.db")
    for args in (
        ("graduate", "--to", "sqlite:///x.db"),
        ("retry",),
        ("--db", "app.db", "cancel"),
        ("show", "1"),
        ("nonsense",),
        ("--db", "app.db", "enqueue", "t", "--payload", "{"),
    ):
        r = run(tmp_path, *args)
        assert r.returncode in (1, 2), args
        assert r.stderr.strip().splitlines()[-1].startswith("errands: "), (args, r.stderr)


# -- the demo leaves a truthful file -------------------------------------------------------


def test_demo_summary_adds_up_and_check_stays_truthful(tmp_path: Path) -> None:
    r = run(tmp_path, "demo", "--db", "demo.db", "--jobs", "40")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    (summary,) = [ln for ln in lines if " jobs in all: the " in ln]
    total = int(summary.split()[0])
    start = lines.index("Jobs per state") + 2
    states = dict(ln.split() for ln in lines[start : start + 6])  # waiting … cancelled
    assert sum(int(n) for n in states.values()) == total
    assert states["queued"] == states["running"] == "0"
    assert "removed from the demo file" in summary
    check = run(tmp_path, "--db", "demo.db", "check")
    assert (check.returncode, check.stdout.strip()) == (0, "ok"), check.stdout
    assert run(tmp_path, "--db", "demo.db", "periodic").stdout.strip() == "no periodic schedules"
