"""What only PostgreSQL does: SKIP LOCKED claims across processes, LISTEN/NOTIFY wake-ups that
survive a dropped connection, recovery after a worker and its sessions are killed, migrations
raced by several processes, and clear errors for a bad server or connection.

Every wait is a bounded wait for a condition; none asserts how fast something happened.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

import errands
from errands.backends import sql as sql_files
from errands.errors import DatabaseError
from errands.worker.loop import Worker
from helpers.pgproc import make_queue
from helpers.support import claim

PGPROC = str(Path(__file__).parents[1] / "helpers" / "pgproc.py")


def spawn(*args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    return subprocess.Popen(
        [sys.executable, PGPROC, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def output(proc: subprocess.Popen[str], timeout: float = 60) -> Any:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


def wait_for(condition: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"gave up after {timeout}s waiting for {what}")
        time.sleep(0.02)


def sql(url: str, query: str, *params: object) -> list[tuple[object, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(query, params or None)
        return cur.fetchall() if cur.description else []


def listener_pids(url: str) -> set[object]:
    return {
        r[0]
        for r in sql(
            url,
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND application_name = 'errands-listener'",
        )
    }


@pytest.fixture
def running_worker(pg_url: str) -> Iterator[tuple[errands.Queue, Worker]]:
    """A worker in a thread that would poll only every 30 s: pickup must come from NOTIFY."""
    q = make_queue(pg_url, poll_interval=30.0)
    w = Worker(q, concurrency=2, handle_signals=False)
    thread = threading.Thread(target=w.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: listener_pids(pg_url), 10, "the worker's LISTEN connection")
        yield q, w
    finally:
        w.stop()
        thread.join(timeout=30)
        q.close()
    assert not thread.is_alive()


def test_skip_locked_claimers_never_share_an_attempt(pg_url: str) -> None:
    total = 2000
    output(spawn("enqueue", pg_url, "note", str(total)))
    procs = [spawn("claim", pg_url, f"w{n}", "7") for n in range(4)]
    held = [tuple(pair) for p in procs for pair in output(p)]
    assert len(held) == len(set(held)) == total
    assert {a for _, a in held} == {1}
    (attempt_rows,) = sql(pg_url, "SELECT count(*), count(DISTINCT job_id) FROM job_attempts")
    assert attempt_rows == (total, total)


def test_two_worker_processes_drain_a_shared_queue_without_double_claims(pg_url: str) -> None:
    total = 1500
    output(spawn("enqueue", pg_url, "note", str(total)))
    procs = [spawn("worker", pg_url, "60", "burst") for _ in range(2)]
    done = sum(output(p)["processed"] for p in procs)
    assert done == total
    assert sql(pg_url, "SELECT status, max(attempts), count(*) FROM jobs GROUP BY 1") == [
        ("succeeded", 1, total)
    ]
    assert sql(pg_url, "SELECT count(*) FROM job_attempts") == [(total,)]


def test_notify_wakes_an_idle_worker_enqueued_by_another_process(
    running_worker: tuple[errands.Queue, Worker], pg_url: str
) -> None:
    q, _ = running_worker
    (job_id,) = output(spawn("enqueue", pg_url, "note", "1"))

    def done() -> bool:
        job = q.get(job_id)
        return job is not None and job.status == "succeeded"

    wait_for(done, 10, "pickup by NOTIFY (poll_interval is 30 s)")


def test_listen_connection_reconnects_after_being_terminated(
    running_worker: tuple[errands.Queue, Worker], pg_url: str
) -> None:
    q, _ = running_worker
    (old,) = listener_pids(pg_url)
    sql(pg_url, "SELECT pg_terminate_backend(%s)", old)
    wait_for(lambda: listener_pids(pg_url) - {old}, 15, "the LISTEN connection to come back")
    (job_id,) = output(spawn("enqueue", pg_url, "note", "1"))

    def done() -> bool:
        job = q.get(job_id)
        return job is not None and job.status == "succeeded"

    wait_for(done, 10, "pickup by NOTIFY after the reconnect")


def test_an_idle_listener_wakes_only_for_a_notification_and_stops_when_closed(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each look at the connection is counted: idle, the listener must not look on a timer
    # (it used to every 0.25 s, plus psycopg's own 0.1 s ticks: 0.27 % of a core for
    # nothing); a NOTIFY must still reach it, and close() must end its thread at once.
    from errands.backends.pg_listener import NotifyListener

    looks: list[float] = []
    notifies = psycopg.Connection.notifies

    def counted(self: psycopg.Connection[Any], **kwargs: Any) -> Any:
        looks.append(time.monotonic())
        return notifies(self, **kwargs)

    monkeypatch.setattr(psycopg.Connection, "notifies", counted)
    got: list[str | None] = []
    listener = NotifyListener(pg_url, "test", got.append, "errands_test_idle")
    try:
        assert listener.connected.wait(10)
        wait_for(lambda: looks, 5, "the first look, right after LISTEN")
        time.sleep(1.0)
        assert len(looks) == 1, f"looked {len(looks)} times in 1 s with nothing sent"
        sql(pg_url, "SELECT pg_notify('errands_test_idle', 'hello')")
        wait_for(lambda: got, 10, "the notification")
        assert got == ["hello"]
    finally:
        listener.close()
    assert not listener._thread.is_alive()


def test_a_listener_whose_socket_is_numbered_above_1024_still_hears_notifications(
    pg_url: str,
) -> None:
    # An application with many files open hands errands' LISTEN connection a descriptor
    # above select()'s limit of 1024: the listener must still wait on it.
    import resource

    from errands.backends.pg_listener import NotifyListener

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip(f"needs more than 1200 open files; the hard limit here is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    filler = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    got: list[str | None] = []
    try:
        listener = NotifyListener(pg_url, "test", got.append, "errands_test_high_fd")
        try:
            assert listener.connected.wait(10)
            sql(pg_url, "SELECT pg_notify('errands_test_high_fd', 'heard')")
            wait_for(lambda: got, 10, "the notification on a descriptor above 1024")
            assert got == ["heard"]
        finally:
            listener.close()
        assert not listener._thread.is_alive()
    finally:
        for fd in filler:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def pooled_pids(url: str) -> set[object]:
    """The sessions of errands' connection pools (not the LISTEN connections)."""
    return {
        r[0]
        for r in sql(
            url,
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND application_name = 'errands'",
        )
    }


def test_pooled_connections_terminated_by_the_server_are_replaced(pg_url: str) -> None:
    with errands.Queue(pg_url) as q:
        first = q.enqueue("t", {})
        assert [j.id for j in claim(q, ["t"])] == [first]  # the pool's connections, just used
        old = pooled_pids(pg_url)
        assert old
        sql(pg_url, "SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) AS pid", list(old))
        wait_for(lambda: not pooled_pids(pg_url) & old, 15, "the sessions to end")
        # Right away (well inside the idle-ping interval): the next calls get live
        # connections, no error.
        second = q.enqueue("t", {})
        assert [j.id for j in claim(q, ["t"])] == [second]
        assert not pooled_pids(pg_url) & old


def test_a_session_ended_mid_transaction_fails_once_retryably_then_recovers(
    pg_url: str,
) -> None:
    # The race no checkout check can close: the server ends the session after the check.
    # That one call fails with DatabaseBusyError (retryable, nothing written); the pool
    # drops the broken connection, so the next call works.
    with errands.Queue(pg_url) as q:
        backend: Any = q.backend
        with pytest.raises(errands.DatabaseBusyError, match="can be retried"):
            with backend._write("enqueue") as conn:
                pid = conn.raw.info.backend_pid
                sql(pg_url, "SELECT pg_terminate_backend(%s)", pid)
                wait_for(lambda: pid not in pooled_pids(pg_url), 15, "the session to end")
                conn.execute("SELECT 1")
        job_id = q.enqueue("t", {})
        assert [j.id for j in claim(q, ["t"])] == [job_id]


def ended(url: str, pid: int) -> Callable[[], bool]:
    return lambda: pid not in pooled_pids(url)


def test_a_transaction_of_ours_left_idle_is_ended_by_the_server(pg_url: str) -> None:
    # A worker frozen mid-write must not hold its row locks for good: the server ends a
    # session idle in a transaction after lease_seconds. Whatever a write sends first
    # (BEGIN, planner settings, the first statement) must leave that timeout armed.
    with errands.Queue(pg_url, lease_seconds=1) as q:
        job_id = q.enqueue("t", {})
        backend: Any = q.backend
        for verb in ("claim", "enqueue"):
            with pytest.raises(errands.DatabaseError):
                with backend._write(verb) as conn:
                    pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
                    wait_for(ended(pg_url, pid), 15, "the server to end the session")
                    conn.execute("SELECT 1")
        assert [j.id for j in claim(q, ["t"])] == [job_id]  # and the next call works


def test_killed_worker_and_sessions_lose_nothing(pg_url: str) -> None:
    with make_queue(pg_url) as q:
        ids = [q.enqueue("slow", {"seconds": 60}) for _ in range(3)]
        ids += q.enqueue_many([("note", {"n": n}) for n in range(20)])
    victim = spawn("worker", pg_url, "2", "forever")
    try:

        def slow_running() -> bool:
            rows = sql(
                pg_url, "SELECT count(*) FROM jobs WHERE type = 'slow' AND status = 'running'"
            )
            return rows == [(3,)]

        wait_for(slow_running, 30, "the victim worker to start the slow jobs")
    finally:
        victim.send_signal(signal.SIGKILL)
        victim.communicate(timeout=30)
    sql(
        pg_url,
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE datname = current_database() AND pid <> pg_backend_pid()",
    )
    with errands.Queue(pg_url, lease_seconds=2, poll_interval=0.2) as q:

        @q.task(name="slow")
        def quick_slow(seconds: float = 0) -> str:  # the rescuer's handler finishes at once
            return "rescued"

        @q.task
        def note(n: int = 0) -> int:
            return n

        w = Worker(q, concurrency=4, handle_signals=False)
        thread = threading.Thread(target=w.run, daemon=True)
        thread.start()
        try:

            def all_done() -> bool:
                return all((j := q.get(i)) is not None and j.status == "succeeded" for i in ids)

            wait_for(all_done, 60, "every job to be recovered and run")
        finally:
            w.stop()
            thread.join(timeout=30)
        for job_id in ids[:3]:
            assert [a.status for a in q.attempts(job_id)] == ["lost", "succeeded"]
            assert "RECOVERED" in [e.event for e in q.events(job_id)]


def test_several_processes_migrating_a_new_database_all_succeed(pg_empty_url: str) -> None:
    procs = [spawn("enqueue", pg_empty_url, "note", "1") for _ in range(6)]
    ids = [output(p)[0] for p in procs]
    assert len(set(ids)) == 6
    versions = [(v,) for v, _ in sql_files.migrations("postgres")]
    assert sql(pg_empty_url, "SELECT version FROM errands_migrations ORDER BY 1") == versions


def test_a_foreign_jobs_table_is_refused(pg_empty_url: str) -> None:
    sql(pg_empty_url, "CREATE TABLE jobs (x int)")
    with pytest.raises(errands.SchemaVersionError, match="did not create"):
        errands.Queue(pg_empty_url)


def test_any_name_errands_needs_is_refused_with_nothing_created(pg_empty_url: str) -> None:
    sql(pg_empty_url, "CREATE TABLE orders (id int, item text)")
    sql(pg_empty_url, "CREATE VIEW workers AS SELECT id FROM orders")
    sql(pg_empty_url, "CREATE INDEX jobs_due ON orders (item)")
    with pytest.raises(errands.SchemaConflictError) as raised:
        errands.Queue(pg_empty_url)
    assert "index 'jobs_due', view 'workers'" in str(raised.value)
    assert "schema of its own" in str(raised.value) and "\n" not in str(raised.value)
    tables = sql(
        pg_empty_url,
        "SELECT relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = current_schema() AND relkind IN ('r', 'v') ORDER BY relname",
    )
    assert tables == [("orders",), ("workers",)]  # no errands_migrations either


def test_unreachable_server_gets_a_one_line_error() -> None:
    where = r"cannot connect to PostgreSQL at 127\.0\.0\.1:1/"
    with pytest.raises(DatabaseError, match=where) as e:
        errands.Queue("postgresql://postgres@127.0.0.1:1/nope")
    assert "\n" not in str(e.value) and "check the server is running" in str(e.value)


def test_connection_to_another_database_is_refused(pg_url: str) -> None:
    with (
        errands.Queue(pg_url) as q,
        psycopg.connect(pg_url.rsplit("/", 1)[0] + "/postgres") as other,
    ):
        with pytest.raises(errands.ConfigurationError, match="same database"):
            q.enqueue("t", {}, connection=other)
