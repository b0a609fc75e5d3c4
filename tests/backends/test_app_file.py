"""The application's own SQLite file (these are SQLite-only: a PostgreSQL database has no file
header, and its conflict check is tested in test_postgres.py).

errands never writes the file's header values that belong to the application
(``user_version``, ``application_id``); a file it refuses is refused before anything in it
changes — not even the switch to WAL; and a worker whose file is deleted or replaced stops.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import errands
from errands.backends import sql
from helpers.support import get_job, sql_rows, wait_for

PRAGMAS = ("journal_mode", "user_version", "application_id", "page_size", "auto_vacuum")


def _app_file(path: str, *extra_sql: str) -> None:
    """An application's database in the default rollback-journal mode, with its own header
    values and one table of its own."""
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 7")
    conn.execute("PRAGMA application_id = 123")
    conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, item TEXT)")
    conn.execute("INSERT INTO orders (item) VALUES ('book'), ('lamp')")
    for statement in extra_sql:
        conn.execute(statement)
    conn.commit()
    conn.close()


def _pragmas(path: str) -> dict[str, object]:
    return {p: sql_rows(path, f"PRAGMA {p}")[0][0] for p in PRAGMAS}


def _snapshot(path: str) -> tuple[bytes, int, list[str]]:
    st = os.stat(path)
    siblings = sorted(p.name for p in Path(path).parent.iterdir())
    return Path(path).read_bytes(), st.st_mtime_ns, siblings


# -- the header belongs to the application ------------------------------------------------


def test_errands_never_writes_user_version_or_application_id(sqlite_path: str) -> None:
    _app_file(sqlite_path)
    with errands.Queue(sqlite_path) as q:

        @q.task
        def ship(item: str) -> str:
            return item

        job_id = ship.enqueue(item="book")
        q.run_worker(concurrency=1, burst=True, handle_signals=False)
        assert get_job(q, job_id).status == "succeeded"
    with errands.Queue(sqlite_path):  # reopening (the no-migration path) writes none either
        pass

    assert sql_rows(sqlite_path, "PRAGMA user_version") == [(7,)]
    assert sql_rows(sqlite_path, "PRAGMA application_id") == [(123,)]
    assert sql_rows(sqlite_path, "SELECT id, item FROM orders") == [(1, "book"), (2, "lamp")]
    assert sql_rows(sqlite_path, "SELECT version FROM errands_migrations ORDER BY 1") == [
        (v,) for v, _ in sql.migrations("sqlite")
    ]


def test_a_new_file_keeps_user_version_zero(sqlite_path: str) -> None:
    with errands.Queue(sqlite_path) as q:
        q.enqueue("t", {})
    assert sql_rows(sqlite_path, "PRAGMA user_version") == [(0,)]
    assert sql_rows(sqlite_path, "PRAGMA application_id") == [(0,)]


def test_a_newer_schema_is_recognised_from_the_table_alone_before_anything_changes(
    sqlite_path: str,
) -> None:
    _app_file(
        sqlite_path,
        "CREATE TABLE errands_migrations (version INTEGER PRIMARY KEY, applied_at REAL NOT NULL)",
        "INSERT INTO errands_migrations VALUES (99, 0)",
    )
    before, pragmas = _snapshot(sqlite_path), _pragmas(sqlite_path)

    with pytest.raises(errands.SchemaVersionError, match=r"version 99.*upgrade errands"):
        errands.Queue(sqlite_path)

    assert _snapshot(sqlite_path) == before
    assert _pragmas(sqlite_path) == pragmas
    assert pragmas["journal_mode"] == "delete"


# -- refused before anything changes ------------------------------------------------------

CONFLICTS = [
    ("CREATE TABLE jobs (id INTEGER PRIMARY KEY, title TEXT)", "table 'jobs'"),
    ("CREATE TABLE workers (id INTEGER PRIMARY KEY, name TEXT)", "table 'workers'"),
    ("CREATE TABLE job_events (id INTEGER PRIMARY KEY)", "table 'job_events'"),
    ("CREATE TABLE periodic (name TEXT)", "table 'periodic'"),
    ("CREATE TABLE job_attempts (id INTEGER PRIMARY KEY)", "table 'job_attempts'"),
    ("CREATE TABLE job_stats_hourly (hour REAL)", "table 'job_stats_hourly'"),
    ("CREATE TABLE Maintenance_Leases (name TEXT)", "table 'Maintenance_Leases'"),
    ("CREATE VIEW jobs AS SELECT id, item FROM orders", "view 'jobs'"),
    ("CREATE INDEX jobs_due ON orders (item)", "index 'jobs_due'"),
    (
        "CREATE TRIGGER job_blobs AFTER INSERT ON orders BEGIN SELECT 1; END",
        "trigger 'job_blobs'",
    ),
]


@pytest.mark.parametrize(("statement", "named"), CONFLICTS, ids=[c[1] for c in CONFLICTS])
def test_a_file_with_a_conflicting_object_is_refused_before_anything_changes(
    sqlite_path: str, statement: str, named: str
) -> None:
    _app_file(sqlite_path, statement)
    before, pragmas = _snapshot(sqlite_path), _pragmas(sqlite_path)
    assert pragmas["journal_mode"] == "delete"

    with pytest.raises(errands.SchemaConflictError) as raised:
        errands.Queue(sqlite_path)

    message = str(raised.value)
    assert "\n" not in message
    assert named in message
    assert sqlite_path in message and "file of its own" in message
    assert isinstance(raised.value, errands.SchemaVersionError)  # the older, broader class
    assert _snapshot(sqlite_path) == before  # bytes, mtime, no -wal/-shm/-journal beside it
    assert _pragmas(sqlite_path) == pragmas  # still journal_mode=delete
    assert sql_rows(sqlite_path, "SELECT id, item FROM orders") == [(1, "book"), (2, "lamp")]


def test_several_conflicts_are_named_in_one_line(sqlite_path: str) -> None:
    _app_file(
        sqlite_path,
        "CREATE TABLE workers (id INTEGER PRIMARY KEY)",
        "CREATE TABLE periodic (name TEXT)",
    )
    with pytest.raises(errands.SchemaConflictError, match="table 'periodic', table 'workers'"):
        errands.Queue(sqlite_path)


def test_the_names_checked_are_read_from_the_migrations() -> None:
    """Every object a migration creates is checked, on both dialects — so a table added by a
    later migration is protected without anyone updating a list."""
    for dialect in ("sqlite", "postgres"):
        created = dict((name, kind) for kind, name in sql.created_objects(dialect))
        for version, script in sql.migrations(dialect):
            for line in script.splitlines():
                words = line.split("--")[0].replace("(", " ").split()
                if words[1:3] == ["OR", "REPLACE"]:  # a later migration's new body
                    words = words[:1] + words[3:]
                if words[2:5] == ["IF", "NOT", "EXISTS"]:  # a table kept if already there
                    words = words[:2] + words[5:]
                if words[:1] == ["CREATE"]:
                    name = words[words.index("ON") - 1] if "INDEX" in words else words[2]
                    assert name.lower() in created, (dialect, version, line)
        assert {"jobs", "workers", "job_events", "periodic", "jobs_due"} <= set(created)
        assert created["jobs_due"] == "index"


def test_an_application_table_with_another_name_is_left_alone(sqlite_path: str) -> None:
    _app_file(sqlite_path, "CREATE TABLE jobs_archive (id INTEGER PRIMARY KEY)")
    with errands.Queue(sqlite_path) as q:
        q.enqueue("t", {})
    assert sql_rows(sqlite_path, "SELECT count(*) FROM jobs_archive") == [(0,)]
    assert sql_rows(sqlite_path, "PRAGMA user_version") == [(7,)]


# -- the file deleted or replaced under a running worker ---------------------------------

APP = textwrap.dedent(
    """
    import os, time
    import errands

    # A short lease: the file check runs on the maintenance cadence (a fraction of it).
    q = errands.Queue(os.environ["APP_DB"], lease_seconds=2, heartbeat_seconds=0.5)

    @q.task
    def slow(n: int) -> int:
        time.sleep(0.2)
        return n
    """
)


def _start_worker(tmp_path: Path, db: str) -> subprocess.Popen[str]:
    (tmp_path / "swap_app.py").write_text(APP)
    return subprocess.Popen(
        [sys.executable, "-m", "errands", "worker", "--app", "swap_app", "--concurrency", "1"],
        cwd=tmp_path,
        env={**os.environ, "APP_DB": db},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _running_worker(tmp_path: Path, db: str) -> subprocess.Popen[str]:
    with errands.Queue(db) as q:
        first = q.enqueue("slow", {"n": 0})
        for n in range(1, 200):
            q.enqueue("slow", {"n": n})
        proc = _start_worker(tmp_path, db)
        wait_for(
            lambda: get_job(q, first).status == "succeeded",
            timeout=60,
            what="the worker to start running jobs",
        )
    return proc


def _finish(proc: subprocess.Popen[str]) -> tuple[int, str]:
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGKILL)
        _, err = proc.communicate()
        pytest.fail(f"the worker kept running on a file that is gone:\n{err}")
    return proc.returncode, err


def test_a_worker_whose_file_is_deleted_stops_with_a_clear_error(
    tmp_path: Path, sqlite_path: str
) -> None:
    proc = _running_worker(tmp_path, sqlite_path)
    os.remove(sqlite_path)

    code, err = _finish(proc)

    assert code == 1, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("errands: ") and "was deleted while errands had it open" in last
    assert "Traceback" not in err
    assert not os.path.exists(sqlite_path)  # no empty file created where the old one was


def test_a_worker_whose_file_is_replaced_stops_and_leaves_the_new_file_alone(
    tmp_path: Path, sqlite_path: str
) -> None:
    proc = _running_worker(tmp_path, sqlite_path)
    other = str(tmp_path / "restored.db")
    _app_file(other)
    before = Path(other).read_bytes()
    os.replace(other, sqlite_path)  # a restore renamed over the live file

    code, err = _finish(proc)

    assert code == 1, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("errands: ") and "was replaced by another file" in last
    # errands wrote nothing into the new file. (The old file's -wal/-shm are still beside
    # it: SQLite leaves them when a live WAL database is renamed over — see
    # docs/troubleshooting.md; delete them before opening the restored file.)
    assert Path(sqlite_path).read_bytes() == before


def test_run_worker_raises_database_replaced_error(sqlite_path: str) -> None:
    q = errands.Queue(sqlite_path, lease_seconds=2, heartbeat_seconds=0.5)

    @q.task
    def remove_my_file() -> None:
        os.remove(sqlite_path)

    q.enqueue("remove_my_file", {})
    q.enqueue("remove_my_file", {}, delay=3600)  # keeps the worker from draining
    with pytest.raises(errands.DatabaseReplacedError, match="was deleted"):
        q.run_worker(concurrency=1, handle_signals=False)
    q.close()
    assert isinstance(errands.DatabaseReplacedError("x"), errands.DatabaseError)


def test_a_supervisor_stops_instead_of_restarting_workers_on_a_deleted_file(
    tmp_path: Path, sqlite_path: str
) -> None:
    """With --processes, a restarted child would create an empty file where the deleted one
    was and carry on there: the supervisor stops every child and exits 1 instead."""
    (tmp_path / "swap_app.py").write_text(APP)
    with errands.Queue(sqlite_path) as q:
        first = q.enqueue("slow", {"n": 0})
        for n in range(1, 400):
            q.enqueue("slow", {"n": n})
        proc = subprocess.Popen(
            [sys.executable, "-m", "errands", "worker", "--app", "swap_app", "--processes", "2"],
            cwd=tmp_path,
            env={**os.environ, "APP_DB": sqlite_path},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        wait_for(
            lambda: get_job(q, first).status == "succeeded",
            timeout=60,
            what="the workers to start running jobs",
        )
        # Both children must have opened the file: one still starting up after the deletion
        # would rightly create a new file, as any first start does.
        live = "SELECT count(*) FROM workers WHERE stopped_at IS NULL"
        wait_for(lambda: sql_rows(sqlite_path, live) == [(2,)], timeout=60, what="2 workers")
    os.remove(sqlite_path)

    code, err = _finish(proc)

    assert code == 1, err
    assert "stopped for good (its database file is gone)" in err
    assert "restarting in" not in err
    assert not os.path.exists(sqlite_path)
