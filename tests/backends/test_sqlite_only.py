"""SQLite-specific behaviour (these tests do not take ``db_url``; they run on SQLite only):
transactional enqueue on the application's own sqlite3 connection, the schema on disk and its
version guard, concurrent creation of a new file, and two worker processes on one file."""

from __future__ import annotations

import json
import multiprocessing
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import errands
from errands.backends import sql as sql_files
from errands.backends.sqlite import SQLiteBackend
from helpers.support import event_names, get_job, sql_rows, wait_for

# Every migration this errands ships, applied once each (not a hard-coded count: a new schema
# version must not break the tests that check "migrated once, in full").
VERSIONS = [(v,) for v, _ in sql_files.migrations("sqlite")]

PROCS = Path(__file__).parents[1] / "procs"
SRC = Path(__file__).parents[2] / "src" / "errands"


@pytest.fixture
def q(sqlite_path: str) -> Iterator[errands.Queue]:
    with errands.Queue(sqlite_path) as queue:
        yield queue


@pytest.fixture
def app_conn(sqlite_path: str, q: errands.Queue) -> Iterator[sqlite3.Connection]:
    """The application's own connection (default isolation: implicit transactions)."""
    conn = sqlite3.connect(sqlite_path)
    conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, item TEXT)")
    conn.commit()
    yield conn
    conn.close()


# -- transactional enqueue ---------------------------------------------------------------------


def test_transactional_enqueue_commit_keeps_the_job(
    q: errands.Queue, app_conn: sqlite3.Connection
) -> None:
    app_conn.execute("INSERT INTO orders (item) VALUES ('book')")
    job_id = q.enqueue("ship", {"item": "book"}, connection=app_conn)

    assert q.get(job_id) is None  # not visible before the application commits
    app_conn.commit()

    job = q.get(job_id)
    assert job is not None and (job.status, job.payload) == ("queued", {"item": "book"})
    assert event_names(q, job_id) == ["ENQUEUED"]
    assert sql_rows(q.url, "SELECT item FROM orders") == [("book",)]


def test_transactional_enqueue_rollback_drops_the_job(
    q: errands.Queue, app_conn: sqlite3.Connection
) -> None:
    app_conn.execute("INSERT INTO orders (item) VALUES ('book')")
    job_id = q.enqueue("ship", {"item": "book"}, connection=app_conn)
    app_conn.rollback()

    assert q.get(job_id) is None
    assert q.jobs() == []
    assert sql_rows(q.url, "SELECT COUNT(*) FROM orders") == [(0,)]
    assert sql_rows(q.url, "SELECT COUNT(*) FROM job_events") == [(0,)]


def test_transactional_enqueue_opens_the_transaction_itself_when_none_is_open(
    q: errands.Queue, app_conn: sqlite3.Connection
) -> None:
    ids = q.enqueue_many([("a", {}), ("b", {})], connection=app_conn)
    assert app_conn.in_transaction
    app_conn.rollback()
    assert all(q.get(i) is None for i in ids)


def test_transactional_enqueue_many_commits_with_the_app(
    q: errands.Queue, app_conn: sqlite3.Connection
) -> None:
    ids = q.enqueue_many([("a", {}), ("b", {})], connection=app_conn)
    app_conn.commit()
    assert [get_job(q, i).type for i in ids] == ["a", "b"]


def test_transactional_enqueue_refuses_an_autocommit_connection(
    q: errands.Queue, sqlite_path: str
) -> None:
    conn = sqlite3.connect(sqlite_path, isolation_level=None)
    try:
        with pytest.raises(errands.ConfigurationError, match="autocommit"):
            q.enqueue("ship", {}, connection=conn)
        assert q.jobs() == []
        conn.execute("BEGIN")  # an explicit transaction on it is fine
        job_id = q.enqueue("ship", {}, connection=conn)
        conn.execute("COMMIT")
        assert q.get(job_id) is not None
    finally:
        conn.close()


def test_transactional_enqueue_refuses_a_connection_to_another_file(
    q: errands.Queue, tmp_path: Path
) -> None:
    other_path = tmp_path / "other.db"
    conn = sqlite3.connect(other_path)
    try:
        with pytest.raises(errands.ConfigurationError, match=r"other\.db"):
            q.enqueue("ship", {}, connection=conn)
        assert not conn.in_transaction
        tables = conn.execute("SELECT name FROM sqlite_master").fetchall()
        assert tables == []
    finally:
        conn.close()
    assert q.jobs() == []


def test_transactional_enqueue_refuses_something_that_is_not_a_sqlite3_connection(
    q: errands.Queue,
) -> None:
    with pytest.raises(errands.ConfigurationError, match=r"sqlite3\.Connection"):
        q.enqueue("ship", {}, connection=object())
    assert q.jobs() == []


# -- schema ----------------------------------------------------------------------------------


def test_a_new_file_gets_the_latest_schema_in_wal_mode(q: errands.Queue) -> None:
    tables = {r[0] for r in sql_rows(q.url, "SELECT name FROM sqlite_master WHERE type='table'")}
    assert {
        "jobs",
        "job_attempts",
        "job_events",
        "workers",
        "periodic",
        "job_stats_hourly",
        "errands_migrations",
    } <= tables
    assert sql_rows(q.url, "PRAGMA journal_mode") == [("wal",)]
    assert sql_rows(q.url, "PRAGMA user_version") == [(0,)]  # the application's, never ours
    assert sql_rows(q.url, "SELECT version FROM errands_migrations ORDER BY 1") == VERSIONS


def test_reopening_migrates_nothing_and_keeps_the_data(sqlite_path: str) -> None:
    with errands.Queue(sqlite_path) as first:
        job_id = first.enqueue("t", {"keep": True})
    with errands.Queue(sqlite_path) as second:
        assert get_job(second, job_id).payload == {"keep": True}
    assert sql_rows(sqlite_path, "SELECT version FROM errands_migrations ORDER BY 1") == VERSIONS


def test_deleting_a_job_cascades_to_its_attempts_and_events(q: errands.Queue) -> None:
    job_id = q.enqueue("t", {})
    q.cancel(job_id)
    conn = sqlite3.connect(q.url)
    try:
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("DELETE FROM jobs WHERE id = ?", (job_id,))
        conn.commit()
        assert conn.execute("SELECT COUNT(*) FROM job_events").fetchone() == (0,)
    finally:
        conn.close()


def test_a_database_from_a_newer_schema_is_refused_and_left_untouched(sqlite_path: str) -> None:
    with errands.Queue(sqlite_path) as q:
        q.enqueue("t", {"precious": 1})
    conn = sqlite3.connect(sqlite_path)
    conn.execute("INSERT INTO errands_migrations (version, applied_at) VALUES (999, 0)")
    conn.execute("PRAGMA user_version = 999")
    conn.commit()
    conn.close()
    snapshot = [
        sql_rows(sqlite_path, "SELECT * FROM jobs"),
        sql_rows(sqlite_path, "SELECT * FROM job_events"),
        sql_rows(sqlite_path, "SELECT * FROM errands_migrations ORDER BY version"),
    ]

    with pytest.raises(errands.SchemaVersionError, match=r"999.*upgrade errands"):
        errands.Queue(sqlite_path)

    after = [
        sql_rows(sqlite_path, "SELECT * FROM jobs"),
        sql_rows(sqlite_path, "SELECT * FROM job_events"),
        sql_rows(sqlite_path, "SELECT * FROM errands_migrations ORDER BY version"),
    ]
    assert after == snapshot
    assert sql_rows(sqlite_path, "PRAGMA user_version") == [(999,)]


def test_a_jobs_table_errands_did_not_create_is_refused(sqlite_path: str) -> None:
    conn = sqlite3.connect(sqlite_path)
    conn.execute("CREATE TABLE jobs (id INTEGER PRIMARY KEY, title TEXT)")
    conn.execute("INSERT INTO jobs (title) VALUES ('plumber')")
    conn.commit()
    conn.close()

    with pytest.raises(errands.SchemaVersionError, match="table 'jobs'"):
        errands.Queue(sqlite_path)

    assert sql_rows(sqlite_path, "SELECT * FROM jobs") == [(1, "plumber")]
    names = {r[0] for r in sql_rows(sqlite_path, "SELECT name FROM sqlite_master")}
    assert names == {"jobs"}  # nothing of errands was created beside it


def test_an_in_memory_database_is_refused() -> None:
    with pytest.raises(errands.ConfigurationError, match="file path"):
        errands.Queue(":memory:")


def test_no_insert_or_replace_anywhere_in_the_source() -> None:
    offenders = [
        str(p.relative_to(SRC))
        for p in SRC.rglob("*")
        if p.suffix in {".py", ".sql"} and "insert or replace" in p.read_text().lower()
    ]
    assert offenders == []


# -- several processes ----------------------------------------------------------------------------


def test_several_processes_opening_a_new_file_at_once_all_succeed(sqlite_path: str) -> None:
    from procs.open_db import open_and_enqueue

    n = 6
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(n + 1)
    procs = [ctx.Process(target=open_and_enqueue, args=(sqlite_path, barrier, i)) for i in range(n)]
    for p in procs:
        p.start()
    try:
        barrier.wait(timeout=120)
        for p in procs:
            p.join(timeout=120)
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
    assert [p.exitcode for p in procs] == [0] * n
    for p in procs:
        p.close()
    assert sql_rows(sqlite_path, "SELECT version FROM errands_migrations ORDER BY 1") == VERSIONS
    payloads = sql_rows(sqlite_path, "SELECT payload FROM jobs WHERE status = 'queued'")
    assert sorted(json.loads(r[0])["n"] for r in payloads) == list(range(n))


def test_a_migration_committed_during_the_preflight_is_not_taken_for_the_apps_tables(
    sqlite_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The race test_several_processes_opening_a_new_file_at_once_all_succeed met once: an
    # existing file with nothing in it yet, and another process's migration committing
    # between the preflight's two looks (is errands here? which names are taken?). Made
    # deterministic: the other "process" (a second Queue, in WAL mode so it can commit while
    # this one reads) migrates at the moment the name check starts.
    boot = sqlite3.connect(sqlite_path)
    boot.execute("PRAGMA journal_mode = WAL")
    boot.close()
    original = SQLiteBackend._refuse_conflicts
    raced: list[bool] = []

    def refuse_conflicts(self: SQLiteBackend, conn: Any) -> None:
        if not raced:
            raced.append(True)
            errands.Queue(sqlite_path).close()  # commits the whole schema meanwhile
        original(self, conn)

    monkeypatch.setattr(SQLiteBackend, "_refuse_conflicts", refuse_conflicts)
    with errands.Queue(sqlite_path) as q:  # no SchemaConflictError: one snapshot, no tables
        assert raced == [True]
        assert q.backend.schema_version() == len(sql_files.migrations("sqlite"))


def test_two_worker_processes_drain_one_file_with_no_job_run_twice(
    sqlite_path: str, tmp_path: Path
) -> None:
    total = 2000
    with errands.Queue(sqlite_path) as producer:  # no tasks: it only stores jobs
        producer.enqueue_many([("record", {"n": n}) for n in range(total)])
    from procs.recording_tasks import SIDE_TABLE

    conn = sqlite3.connect(sqlite_path)
    conn.execute(SIDE_TABLE)
    conn.commit()
    conn.close()

    signals = tmp_path / "signals"
    signals.mkdir()
    workers = [
        subprocess.Popen(
            [sys.executable, str(PROCS / "drain_worker.py"), sqlite_path, str(signals)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    try:
        wait_for(lambda: len(list(signals.glob("ready-*"))) == 2, timeout=120, what="2 workers")
        (signals / "go").touch()
        outputs = [w.communicate(timeout=300) for w in workers]
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
                w.communicate()
    for w, (_out, err) in zip(workers, outputs, strict=True):
        assert w.returncode == 0, err

    runs = sql_rows(sqlite_path, "SELECT job_id, attempt, pid FROM executions")
    job_ids = [r[0] for r in runs]
    assert len(job_ids) == total  # none lost, none run twice
    assert len(set(job_ids)) == total
    assert {r[1] for r in runs} == {1}
    assert len({r[2] for r in runs}) == 2  # both processes took part
    assert sql_rows(sqlite_path, "SELECT status, COUNT(*), MAX(attempts) FROM jobs GROUP BY 1") == [
        ("succeeded", total, 1)
    ]
    assert sql_rows(sqlite_path, "SELECT COUNT(*) FROM job_attempts") == [(total,)]
    summaries = [json.loads(out) for out, _ in outputs]
    assert sum(s["ok"] for s in summaries) == total


def test_opening_an_up_to_date_queue_needs_no_write_lock(sqlite_path: str) -> None:
    errands.Queue(sqlite_path).close()  # create and migrate
    holder = sqlite3.connect(sqlite_path, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")  # a long transaction elsewhere holds the lock
        q = errands.Queue(sqlite_path, busy_timeout=0.2)
        assert q.stats()["counts"]["queued"] == 0
        q.close()
    finally:
        holder.execute("ROLLBACK")
        holder.close()
