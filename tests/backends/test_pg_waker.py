"""PostgreSQL's coalesced wake-up (backends/pg_waker.py): a lone producer's statement sends its
own NOTIFY; an enqueue that finds another of its process in flight leaves the NOTIFY to the
Waker, which sends one after the commit on a connection of its own. Which path ran is read off
the notification itself: PostgreSQL tells the listener the pid of the backend that sent it.

"In flight" is made real, not simulated: a test transaction holds an uncommitted job with a
unique key, so an enqueue of that key waits on it inside the server. The behaviour both
backends share (bursts of concurrent producers each wake an idle worker process) is in
tests/runtime/test_wakeup.py; every wait here is bounded, none is timed.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import errands
from errands.backends.pg_waker import Waker
from errands.backends.postgres import PostgresBackend
from helpers.support import wait_for

CHANNEL = "errands_jobs"


def pg(q: errands.Queue) -> PostgresBackend:
    assert isinstance(q.backend, PostgresBackend)
    return q.backend


class Heard:
    """A LISTEN connection on the wake-up channel: the pids of the backends that notified."""

    def __init__(self, url: str, channel: str = CHANNEL) -> None:
        self.conn = psycopg.connect(url, autocommit=True)
        self.conn.execute(f"LISTEN {channel}")

    def pids(self, timeout: float = 10.0, expect: int = 1) -> list[int]:
        got = [n.pid for n in self.conn.notifies(timeout=timeout, stop_after=expect)]
        assert len(got) >= expect, f"heard {len(got)} of {expect} notification(s) in {timeout}s"
        return got

    def none(self, quiet: float = 0.5) -> None:
        got = [n.pid for n in self.conn.notifies(timeout=quiet)]
        assert not got, f"unexpected notifications from {got}"

    def close(self) -> None:
        self.conn.close()


@pytest.fixture
def heard(pg_url: str) -> Iterator[Heard]:
    h = Heard(pg_url)
    yield h
    h.close()


@pytest.fixture
def queue(pg_url: str) -> Iterator[errands.Queue]:
    q = errands.Queue(pg_url)
    yield q
    q.close()


def waiting_on_a_lock(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock' AND application_name = 'errands'"
        ).fetchone()
    return int(row[0]) if row else 0


@contextlib.contextmanager
def one_in_flight(q: errands.Queue, url: str) -> Iterator[list[int]]:
    """An enqueue of ``q`` held inside the server (its unique key is taken by an uncommitted
    row of a test transaction) for the length of the block; then the row is rolled back, the
    held enqueue inserts its job, and its id is in the yielded list."""
    blocker = psycopg.connect(url)
    blocker.execute(
        f"INSERT INTO {q.table('jobs')} (queue, type, payload, status, run_at, created_at, "
        "unique_key) VALUES ('default', 't', '{}', 'queued', now(), now(), 'held')"
    )
    ids: list[int] = []
    errors: list[BaseException] = []

    def held() -> None:
        try:
            ids.append(q.enqueue("t", {}, unique_key="held"))
        except BaseException as exc:  # surfaced below, in the test's thread
            errors.append(exc)

    thread = threading.Thread(target=held)
    thread.start()
    try:
        wait_for(
            lambda: waiting_on_a_lock(url) == 1,
            timeout=10,
            what="the held enqueue to wait on the row",
        )
        yield ids
    finally:
        blocker.rollback()
        blocker.close()
        thread.join(30)
    assert not errors, errors
    assert len(ids) == 1


def waker_pid(q: errands.Queue) -> int:
    waker = pg(q).producers.waker
    assert waker is not None, "no Waker was started"
    wait_for(lambda: waker._conn is not None, timeout=10, what="the Waker's connection")
    assert waker._conn is not None
    return int(waker._conn.info.backend_pid)


def sessions(url: str, name: str) -> set[int]:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND application_name = %s",
            (name,),
        ).fetchall()
    return {int(r[0]) for r in rows}


def pool_pids(url: str) -> set[int]:
    return sessions(url, "errands")


def waker_pids(url: str) -> set[int]:
    return sessions(url, "errands-waker")


def test_a_lone_enqueue_sends_its_own_notify_and_starts_no_waker(
    queue: errands.Queue, heard: Heard, pg_url: str
) -> None:
    queue.enqueue("t", {})
    (pid,) = heard.pids()
    assert pg(queue).producers.waker is None
    assert pid in pool_pids(pg_url)
    queue.enqueue("t", {}, run_at=time.time() + 3600)  # not due: wakes nobody
    heard.none()


def test_an_enqueue_beside_another_in_flight_leaves_the_notify_to_the_waker(
    queue: errands.Queue, heard: Heard, pg_url: str
) -> None:
    with one_in_flight(queue, pg_url) as held:
        job_id = queue.enqueue("t", {})
        (pid,) = heard.pids()
        assert pid == waker_pid(queue)
        assert waker_pids(pg_url) == {pid}  # named apart from the pool's sessions
        # ...sent after the job was committed: the notified listener finds it.
        job = queue.get(job_id)
        assert job is not None and job.status == "queued"
    # The held enqueue was alone when it started: its own statement notified.
    (pid,) = heard.pids()
    assert pid != waker_pid(queue)
    assert queue.get(held[0]) is not None
    queue.enqueue("t", {}, run_at=time.time() + 3600)
    heard.none()


def test_an_idle_worker_runs_a_job_whose_wake_up_the_waker_sent(
    queue: errands.Queue, pg_url: str
) -> None:
    # The worker polls every 30 s: within the deadline only the Waker's NOTIFY (the job's
    # enqueue overlapped the held one, so its own statement sent none) can wake it.
    from errands.worker.loop import Worker
    from helpers.pgproc import make_queue

    worker_q = make_queue(pg_url, poll_interval=30.0)
    worker = Worker(worker_q, concurrency=1, handle_signals=False)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: worker_q.workers(), timeout=10, what="the worker to register")
        time.sleep(0.3)  # past its first claim: from here on it waits for a wake-up
        with one_in_flight(queue, pg_url):
            job_id = queue.enqueue("note", {"n": 1})
            wait_for(
                lambda: (job := queue.get(job_id)) is not None and job.status == "succeeded",
                timeout=10,
                what="the job woken by the Waker's NOTIFY (the poll is 30 s)",
            )
            waker = pg(queue).producers.waker
            assert waker is not None
            wait_for(lambda: waker.sent >= 1, timeout=10, what="the waker to count its NOTIFY")
    finally:
        worker.stop()
        thread.join(30)
        worker_q.close()


def test_under_a_table_prefix_the_waker_notifies_the_prefixed_channel(pg_empty_url: str) -> None:
    # A worker of a prefixed installation listens on errands_errands_jobs: a NOTIFY on the
    # bare channel would wake nobody there.
    q = errands.Queue(f"{pg_empty_url}?table_prefix=errands_")
    heard = Heard(pg_empty_url, "errands_" + CHANNEL)
    bare = Heard(pg_empty_url)
    try:
        with one_in_flight(q, pg_empty_url):
            q.enqueue("t", {})
            (pid,) = heard.pids()
            assert pid == waker_pid(q)
        heard.pids()  # the held one's own
        bare.none()
    finally:
        heard.close()
        bare.close()
        q.close()


def test_async_producers_take_the_same_paths(
    queue: errands.Queue, heard: Heard, pg_url: str
) -> None:
    import asyncio

    async def one() -> int:
        return await queue.enqueue_async("t", {})

    asyncio.run(one())
    (pid,) = heard.pids()
    assert pg(queue).producers.waker is None
    with one_in_flight(queue, pg_url):
        asyncio.run(one())
        (pid,) = heard.pids()
        assert pid == waker_pid(queue)
    heard.pids()  # the held one's own


def test_a_held_unique_key_beside_another_in_flight_still_wakes_workers(
    queue: errands.Queue, heard: Heard, pg_url: str
) -> None:
    first = queue.enqueue("t", {}, unique_key="k")
    heard.pids()
    with one_in_flight(queue, pg_url):
        assert queue.enqueue("t", {}, unique_key="k") == first
        (pid,) = heard.pids()
        assert pid == waker_pid(queue)
    heard.pids()


def test_the_waker_reconnects_after_its_session_is_terminated(
    queue: errands.Queue, heard: Heard, pg_url: str
) -> None:
    with one_in_flight(queue, pg_url):
        queue.enqueue("t", {})
        heard.pids()
        old = waker_pid(queue)
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("SELECT pg_terminate_backend(%s)", (old,))
        wait_for(
            lambda: old not in waker_pids(pg_url), timeout=10, what="the Waker's session to end"
        )
        queue.enqueue("t", {})
        (pid,) = heard.pids()
        assert pid == waker_pid(queue) != old
        # The new session is set up as the first was: its NOTIFY waits for no WAL flush.
        waker = pg(queue).producers.waker
        assert waker is not None and waker._conn is not None
        row = waker._conn.execute("SHOW synchronous_commit").fetchone()
        assert row is not None and row[0] == "off"
    heard.pids()


def test_a_waker_whose_server_is_gone_gives_up_with_a_warning_and_raises_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    waker = Waker("postgresql://postgres:s3cret@127.0.0.1:1/none", {"autocommit": True}, CHANNEL)
    waker.RETRY_DELAY = 0.0
    try:
        assert waker.poke()
        wait_for(
            lambda: "could not send the wake-up NOTIFY" in caplog.text,
            timeout=30,
            what="the warning",
        )
        assert "poll_interval" in caplog.text
        assert "127.0.0.1:1/none" in caplog.text and "s3cret" not in caplog.text
        assert waker.sent == 0
        assert waker._thread is not None and waker._thread.is_alive()  # ready for the next
    finally:
        waker.close()
    assert waker._thread is not None and not waker._thread.is_alive()
    assert not waker.poke()  # closed: the caller is told


def test_a_surprise_in_the_waker_thread_fails_one_burst_and_not_the_next(
    pg_url: str, heard: Heard, caplog: pytest.LogCaptureFixture
) -> None:
    """Not only the driver's errors: an exception of any kind while sending must leave the
    thread alive, or every later poke would wait for a NOTIFY nobody sends."""

    class Surprised(Waker):
        surprises = 2  # both tries of the first burst

        def _connect(self) -> psycopg.Connection[Any]:
            if self.surprises:
                self.surprises -= 1
                raise RuntimeError("a surprise")
            return super()._connect()

    waker = Surprised(pg_url, {"autocommit": True}, CHANNEL)
    waker.RETRY_DELAY = 0.0
    try:
        waker.poke()
        wait_for(lambda: "a surprise" in caplog.text, timeout=10, what="the warning")
        heard.none()
        waker.poke()
        heard.pids()
        # The thread counts a NOTIFY once the server answered it, which may be after the
        # listener already has it.
        wait_for(lambda: waker.sent == 1, timeout=10, what="the waker to count its NOTIFY")
    finally:
        waker.close()


def test_close_sends_a_notify_still_owed_and_leaves_no_session(pg_url: str, heard: Heard) -> None:
    q = errands.Queue(pg_url)
    with one_in_flight(q, pg_url):
        q.enqueue("t", {})
        heard.pids()
        pid = waker_pid(q)
    heard.pids()
    waker = pg(q).producers.waker
    assert waker is not None
    waker.poke()
    q.close()
    assert heard.pids() == [pid]
    assert waker._thread is not None and not waker._thread.is_alive()
    wait_for(lambda: pid not in waker_pids(pg_url), timeout=10, what="the Waker's session to close")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX only")
def test_a_forked_child_makes_its_own_waker_and_leaves_the_parents_alone(
    queue: errands.Queue, heard: Heard
) -> None:
    parent = pg(queue).producers.waker_here()
    parent.poke()
    (parent_pid,) = heard.pids()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through its exit status
        code = 1
        try:
            mine = pg(queue).producers.waker_here()
            code = 0 if mine is not parent and mine.poke() else 2
            mine.close()
            code = code or (0 if mine.sent == 1 else 3)
        finally:
            os._exit(code)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    (child_pid,) = heard.pids()
    assert child_pid != parent_pid
    assert pg(queue).producers.waker is parent
    parent.poke()  # the parent's session was not touched by the child
    assert heard.pids() == [parent_pid]
