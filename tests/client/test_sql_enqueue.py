"""Enqueue from any language: PostgreSQL's ``errands_enqueue`` function and SQLite's
``errands_enqueue`` view (migration 13, docs/from-other-languages.md), each driven here
through a plain driver connection of its own — never errands' — as another language would.

A job written by SQL must be the job ``q.enqueue`` writes with the same arguments, column by
column (ids and times aside), with the same event; it honours unique keys and priorities, is
refused with a clear error on bad input (writing nothing), runs on a Python worker, and — on
PostgreSQL — wakes the listening workers.
"""

from __future__ import annotations

import sqlite3
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

import errands
from errands.backends.base import TaskTypeRow
from helpers.interop import app_transaction, sql_enqueue
from helpers.support import get_job, is_sqlite, sql_rows

# Every jobs column but the id and the two times the write stamps itself.
JOB_COLUMNS = (
    "queue, type, payload, status, priority, attempts, max_attempts, started_at, finished_at, "
    "worker_id, heartbeat_at, lease_expires_at, unique_key, error_code, error_detail, result, "
    "payload_ref, result_ref, cancel_requested, headers, limit_key, limit_group, progress, "
    "progress_message, progress_at"
)
EVENT_COLUMNS = "event, actor, detail"


def job_row(url: str, job_id: int) -> tuple[Any, ...]:
    (row,) = sql_rows(url, f"SELECT {JOB_COLUMNS} FROM jobs WHERE id = {int(job_id)}")
    return row


def event_rows(url: str, job_id: int) -> list[tuple[Any, ...]]:
    return sql_rows(url, f"SELECT {EVENT_COLUMNS} FROM job_events WHERE job_id = {int(job_id)}")


def times(url: str, job_id: int) -> tuple[float, float]:
    (row,) = sql_rows(url, f"SELECT run_at, created_at FROM jobs WHERE id = {int(job_id)}")
    return float(row[0]), float(row[1])


CALLS: list[dict[str, Any]] = [
    {},
    {"queue": "emails", "priority": 7, "max_attempts": 3, "unique_key": "welcome:42"},
    {"run_at": datetime(2031, 5, 4, 3, 2, 1, tzinfo=UTC), "priority": -5},
]


@pytest.mark.parametrize("options", CALLS, ids=["defaults", "options", "run_at"])
def test_a_job_enqueued_by_sql_is_the_job_q_enqueue_writes(
    db_url: str, make_queue: Callable[..., errands.Queue], options: dict[str, Any]
) -> None:
    q = make_queue()
    payload = {"to": "a@example.com", "n": [1, 2.5, None, True], "é": {"x": "ü"}}
    by_python = q.enqueue("send", payload, actor="sql", **options)
    before = job_row(db_url, by_python)
    q.cancel(by_python)  # final: the SQL job's unique_key is free again (as for q.enqueue)
    by_sql = sql_enqueue(
        db_url,
        "send",
        '{"to": "a@example.com", "n": [1, 2.5, null, true], "é": {"x": "ü"}}',
        **options,
    )
    assert by_sql != by_python
    assert job_row(db_url, by_sql) == before
    assert event_rows(db_url, by_sql) == event_rows(db_url, by_python)[:1]
    assert event_rows(db_url, by_sql) == [("ENQUEUED", "sql", None)]
    run_at, created_at = times(db_url, by_sql)
    if "run_at" in options:
        assert run_at == pytest.approx(options["run_at"].timestamp())
        assert times(db_url, by_python)[0] == pytest.approx(run_at)
    else:
        assert run_at == created_at  # due at once, as q.enqueue's
    assert get_job(q, by_sql).payload == payload


def test_options_left_out_are_the_ones_the_worker_declared(
    db_url: str, make_queue: Callable[..., errands.Queue]
) -> None:
    q = make_queue()  # no tasks: a producer, like a SQL caller
    q.backend.declare_task_types(
        [TaskTypeRow("resize", "images", 4, 9, 30.0, declared_by="w1")], q.clock()
    )
    by_python = q.enqueue("resize", {"img": 1})
    by_sql = sql_enqueue(db_url, "resize", '{"img": 1}', actor="api")
    assert job_row(db_url, by_sql) == job_row(db_url, by_python)
    assert job_row(db_url, by_sql)[:2] == ("images", "resize")
    job = get_job(q, by_sql)
    assert (job.queue, job.priority, job.max_attempts) == ("images", 4, 9)
    # What the call gives wins over the declaration.
    given = get_job(q, sql_enqueue(db_url, "resize", "{}", queue="q2", priority=0))
    assert (given.queue, given.priority, given.max_attempts) == ("q2", 0, 9)


def test_a_unique_key_held_by_an_active_job_returns_that_job_and_writes_nothing(
    db_url: str, queue: errands.Queue
) -> None:
    first = sql_enqueue(db_url, "sync", '{"n": 1}', unique_key="sync:42")
    assert sql_enqueue(db_url, "sync", '{"n": 2}', unique_key="sync:42") == first
    assert queue.enqueue("sync", {"n": 3}, unique_key="sync:42") == first
    assert sql_rows(db_url, "SELECT count(*) FROM jobs") == [(1,)]
    assert sql_rows(db_url, "SELECT count(*) FROM job_events") == [(1,)]
    assert get_job(queue, first).payload == {"n": 1}
    queue.cancel(first)  # final: the key is free again
    second = sql_enqueue(db_url, "sync", '{"n": 4}', unique_key="sync:42")
    assert second != first and get_job(queue, second).status == "queued"


def test_sql_jobs_run_on_a_python_worker_by_priority_and_the_result_reads_back(
    db_url: str, make_queue: Callable[..., errands.Queue]
) -> None:
    q = make_queue()
    ran: list[int] = []

    @q.task()
    def add(a: int, b: int) -> int:
        ran.append(a)
        return a + b

    low = sql_enqueue(db_url, "add", '{"a": 1, "b": 2}')
    high = sql_enqueue(db_url, "add", '{"a": 10, "b": 20}', priority=5)
    q.run_worker(burst=True, concurrency=1)
    assert ran == [10, 1]
    assert q.wait(low, timeout=30).result == 3
    assert get_job(q, high).result == 30 and get_job(q, high).status == "succeeded"


def expect_refused(url: str, match: str, job_type: Any, payload: Any, **options: Any) -> None:
    errors: tuple[type[BaseException], ...] = (sqlite3.Error,)
    if not is_sqlite(url):
        import psycopg

        errors = (psycopg.Error,)
    with pytest.raises(errors, match=match) as refused:
        sql_enqueue(url, job_type, payload, **options)
    if not is_sqlite(url) and match.startswith("errands_enqueue"):
        assert getattr(refused.value, "sqlstate", None) == "23514"  # check_violation


BAD: list[tuple[str, Any, Any, dict[str, Any]]] = [
    ("type must be a non-empty string", "", "{}", {}),
    ("type must be a non-empty string", None, "{}", {}),
    ("contains a comma", "a,b", "{}", {}),
    ("at most 255|longer than 255", "t" * 256, "{}", {}),
    ("integer outside the signed 64-bit range", "t", '{"n": 99999999999999999999}', {}),
    ("nested deeper than 100 levels", "t", "[" * 101 + "]" * 101, {}),
    ("larger than 1048576|at most 1048576", "t", '"' + "x" * 1_048_600 + '"', {}),
    ("priority must be", "t", "{}", {"priority": 2**31}),
    ("priority must be", "t", "{}", {"priority": -(2**31) - 1}),
    ("max_attempts must be", "t", "{}", {"max_attempts": 2**40}),
    ("max_attempts must be", "t", "{}", {"max_attempts": 0}),
    ("max_attempts must be", "t", "{}", {"max_attempts": 1_000_001}),
    ("queue", "t", "{}", {"queue": "a,b"}),
    ("queue", "t", "{}", {"queue": ""}),
    ("unique_key", "t", "{}", {"unique_key": ""}),
    ("unique_key", "t", "{}", {"unique_key": "k" * 1025}),
]


@pytest.mark.parametrize(
    ("match", "job_type", "payload", "options"),
    BAD,
    ids=lambda v: str(v)[:30] if isinstance(v, str) else None,
)
def test_bad_input_is_refused_naming_what_is_wrong_and_writes_nothing(
    db_url: str,
    queue: errands.Queue,
    match: str,
    job_type: Any,
    payload: Any,
    options: dict[str, Any],
) -> None:
    expect_refused(db_url, f"errands_enqueue: .*({match})", job_type, payload, **options)
    assert sql_rows(db_url, "SELECT count(*) FROM jobs") == [(0,)]
    assert sql_rows(db_url, "SELECT count(*) FROM job_events") == [(0,)]


def test_payloads_every_backend_refuses_are_refused(db_url: str, queue: errands.Queue) -> None:
    """NUL and lone surrogates: PostgreSQL's jsonb refuses them itself (the caller's cast, so
    its own words); SQLite's view finds them in the text."""
    nul, lone = '{"a": "x\\u0000y"}', '["\\ud800"]'
    sqlite = is_sqlite(db_url)
    expect_refused(db_url, "NUL character" if sqlite else "Unicode", "t", nul)
    expect_refused(db_url, "lone surrogate" if sqlite else "Unicode", "t", lone)
    # An escaped backslash before u0000 is text, and a surrogate pair one character.
    fine = sql_enqueue(db_url, "t", '["\\\\u0000", "\\ud83d\\ude00"]')
    assert get_job(queue, fine).payload == ["\\u0000", "\U0001f600"]
    assert sql_rows(db_url, "SELECT count(*) FROM jobs") == [(1,)]


@pytest.mark.parametrize("payload", [None, "null"])
def test_no_payload_is_an_empty_object_as_in_python(
    db_url: str, queue: errands.Queue, payload: str | None
) -> None:
    assert get_job(queue, sql_enqueue(db_url, "t", payload)).payload == {}
    assert get_job(queue, queue.enqueue("t", None)).payload == {}


def test_a_run_at_outside_the_years_1_to_9999_is_refused(db_url: str, queue: errands.Queue) -> None:
    # SQLite: unix seconds; PostgreSQL: a timestamptz, whose 'infinity' Python has no datetime for
    far: Any = 1e13 if is_sqlite(db_url) else "infinity"
    expect_refused(db_url, "errands_enqueue: run_at must be", "t", "{}", run_at=far)
    assert sql_rows(db_url, "SELECT count(*) FROM jobs") == [(0,)]


def listening(q: errands.Queue, woken: threading.Event) -> Any:
    """The wake-up listener a worker of ``q`` runs, started, setting ``woken``."""
    listener: Any = q.backend.listen(woken.set)
    if hasattr(listener, "connected"):  # PostgreSQL: LISTEN is issued in its thread
        assert listener.connected.wait(10)
    time.sleep(0.1)  # SQLite: the thread has read its first data_version
    return listener


def test_a_sql_enqueue_wakes_a_listening_worker(queue: errands.Queue) -> None:
    """PostgreSQL: the function's NOTIFY on the workers' channel, delivered at commit (the
    listener has no other way to hear it); SQLite: the listener's data_version check notices
    the commit of a writer that sends no wake-up (docs/from-other-languages.md)."""
    woken = threading.Event()
    listener = listening(queue, woken)
    try:
        sql_enqueue(queue.url, "t", "{}")
        assert woken.wait(10), "a job enqueued by SQL woke no listener"
    finally:
        listener.close()


# -- under a table prefix ------------------------------------------------------------------


def test_under_a_table_prefix_the_function_or_view_carries_it_and_writes_its_tables(
    db_url: str, make_queue: Callable[..., errands.Queue]
) -> None:
    if is_sqlite(db_url):
        conn = sqlite3.connect(db_url)  # the application's own jobs table, left alone
        conn.execute("CREATE TABLE jobs (id INTEGER PRIMARY KEY, title TEXT)")
        conn.commit()
        conn.close()
    else:
        app_transaction(db_url, ["DROP SCHEMA public CASCADE", "CREATE SCHEMA public"], commit=True)
        app_transaction(
            db_url, ["CREATE TABLE jobs (id bigint PRIMARY KEY, title text)"], commit=True
        )
    q = make_queue(table_prefix="errands_")
    listener = None
    woken = threading.Event()
    if not is_sqlite(db_url):  # the NOTIFY goes to the prefixed channel, where its workers are
        listener = listening(q, woken)
    try:
        job_id = sql_enqueue(db_url, "t", '{"a": 1}', name="errands_errands_enqueue", priority=2)
        if listener is not None:
            assert woken.wait(10), "the prefixed installation's workers were not woken"
    finally:
        if listener is not None:
            listener.close()
    job = get_job(q, job_id)
    assert (job.type, job.payload, job.priority) == ("t", {"a": 1}, 2)
    assert [e.event for e in q.events(job_id)] == ["ENQUEUED"]
    assert sql_rows(db_url, "SELECT count(*) FROM jobs") == [(0,)]  # the app's table
    with pytest.raises(Exception, match="errands_enqueue"):
        sql_enqueue(db_url, "t", "{}")  # no unprefixed twin


@pytest.mark.parametrize("field", ["type", "queue", "unique_key", "actor"])
def test_a_nul_character_in_a_name_is_refused(
    db_url: str, queue: errands.Queue, field: str
) -> None:
    """SQLite stores text holding NUL as given, so the view refuses it; PostgreSQL's text
    cannot hold one at all (the driver or the server refuses it before the function runs)."""
    args: dict[str, Any] = {"type": "t", field: "a\x00b"}
    job_type = args.pop("type")
    match = f"errands_enqueue: {field} .*NUL" if is_sqlite(db_url) else "NUL"
    expect_refused(db_url, match, job_type, "{}", **args)
    assert sql_rows(db_url, "SELECT count(*) FROM jobs") == [(0,)]


def test_a_graduated_sqlite_file_refuses_sql_enqueues_too(sqlite_path: str) -> None:
    with errands.Queue(sqlite_path) as q:
        q.backend.mark_graduated("postgresql://db.example/app", q.clock())
    with pytest.raises(sqlite3.IntegrityError, match="errands graduate"):
        sql_enqueue(sqlite_path, "t", "{}")
    assert sql_rows(sqlite_path, "SELECT count(*) FROM jobs") == [(0,)]


def test_a_role_with_the_documented_privileges_can_enqueue(pg_url: str) -> None:
    """docs/from-other-languages.md, *Privileges*: exactly those grants are enough."""
    import psycopg

    role = f"enqueuer_{uuid.uuid4().hex[:12]}"
    errands.Queue(pg_url).close()
    with psycopg.connect(pg_url, autocommit=True) as pg:
        pg.execute(f"CREATE ROLE {role}")
        try:
            pg.execute(f"GRANT SELECT, INSERT ON jobs, job_events TO {role}")
            pg.execute(f"GRANT SELECT ON task_types TO {role}")
            pg.execute(f"GRANT USAGE ON SEQUENCE jobs_id_seq, job_events_id_seq TO {role}")
            pg.execute(f"SET ROLE {role}")
            first = pg.execute("SELECT errands_enqueue('t', '{}', unique_key => 'k')").fetchone()
            again = pg.execute("SELECT errands_enqueue('t', '{}', unique_key => 'k')").fetchone()
            assert first is not None and again == first
            pg.execute("RESET ROLE")
            pg.execute(f"REVOKE INSERT ON job_events FROM {role}")
            pg.execute(f"SET ROLE {role}")
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                pg.execute("SELECT errands_enqueue('t', '{}')")
        finally:
            pg.execute("RESET ROLE")
            pg.execute(f"DROP OWNED BY {role}")
            pg.execute(f"DROP ROLE {role}")


def test_a_limited_types_job_enqueued_by_sql_runs_outside_the_limit(
    db_url: str, make_queue: Callable[..., errands.Queue]
) -> None:
    """docs/from-other-languages.md, *What SQL callers cannot get*: a task's ``limit=`` lives
    in Python, so the SQL job carries no limit key and is claimed as an unlimited one."""
    q = make_queue()

    @q.task(limit=errands.Limit("smtp", running=1))
    def mail(n: int) -> int:
        return n

    by_sql = sql_enqueue(db_url, "mail", '{"n": 1}')
    assert sql_rows(db_url, f"SELECT limit_key FROM jobs WHERE id = {by_sql}") == [(None,)]
    q.run_worker(burst=True)
    assert get_job(q, by_sql).result == 1
    by_python = q.enqueue("mail", {"n": 2})
    assert sql_rows(db_url, f"SELECT limit_key FROM jobs WHERE id = {by_python}") == [("smtp",)]
