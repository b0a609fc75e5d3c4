"""The wake-up channel: a listener hears commits made elsewhere without polling for them.

On SQLite the datagram path is isolated by raising the listener's fallback check of
``data_version`` to 60 s (``wakeup.FALLBACK``): within the tests' deadlines only a datagram can
wake it. PostgreSQL's listener is LISTEN/NOTIFY. No figure here is timed; latency and idle CPU
are measured by ``errands bench`` and tests/runtime/test_wakeup.py prints them.
"""

from __future__ import annotations

import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import errands
from errands.backends import sqlite_wakeup as wakeup
from helpers.support import wait_for

# A negative check ("nothing woke it") waits this long; any real wake-up takes milliseconds.
QUIET = 0.5


class Calls:
    def __init__(self) -> None:
        self.n = 0
        self.event = threading.Event()

    def __call__(self) -> None:
        self.n += 1
        self.event.set()


@pytest.fixture
def no_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wakeup, "FALLBACK", 60.0)


@pytest.fixture
def listening(
    no_fallback: None,
) -> Iterator[Callable[..., tuple[Calls, Any]]]:
    opened: list[Any] = []

    def start(q: errands.Queue, **kwargs: Any) -> tuple[Calls, Any]:
        calls = Calls()
        listener = q.backend.listen(calls, **kwargs)
        opened.append(listener)
        if hasattr(listener, "connected"):  # PostgreSQL: LISTEN is issued in its thread
            assert listener.connected.wait(10)
        time.sleep(0.1)  # the thread has read its first data_version
        return calls, listener

    yield start
    for listener in opened:
        listener.close()


PRODUCER = """
import sys, errands
with errands.Queue(sys.argv[1]) as q:
    q.enqueue("t", {})
"""


def test_an_enqueue_in_another_process_wakes_the_listener(
    queue: errands.Queue, listening: Callable[..., tuple[Calls, Any]]
) -> None:
    calls, _ = listening(queue)
    subprocess.run([sys.executable, "-c", PRODUCER, queue.url], check=True, timeout=60)
    assert calls.event.wait(10), "the listener was not woken by another process's enqueue"


def test_a_transactional_enqueue_wakes_the_listener_once_the_app_commits(
    queue: errands.Queue, listening: Callable[..., tuple[Calls, Any]], is_sqlite: bool
) -> None:
    calls, _ = listening(queue)
    if is_sqlite:
        conn: Any = sqlite3.connect(queue.url)
    else:
        import psycopg

        conn = psycopg.connect(queue.url)
    try:
        queue.enqueue("t", {}, connection=conn)
        time.sleep(0.05)  # the job is not committed yet: nothing to claim, so no wake-up
        assert calls.n == 0
        conn.commit()
        assert calls.event.wait(10), "the commit of a transactional enqueue woke nobody"
    finally:
        conn.close()


def test_a_subscriber_hears_completions_and_a_worker_listener_does_not(
    sqlite_path: str, listening: Callable[..., tuple[Calls, Any]]
) -> None:
    with errands.Queue(sqlite_path) as q, errands.Queue(sqlite_path) as worker_q:

        @worker_q.task
        def t() -> None:
            return None

        job_id = q.enqueue("t", {})
        jobs_only, _ = listening(q)
        everything, _ = listening(q, completions=True)
        worker_q.run_worker(burst=True, handle_signals=False)
        assert everything.event.wait(10), "the subscriber was not told of the completion"
        job = q.get(job_id)
        assert job is not None and job.status == "succeeded"
        time.sleep(QUIET)
        # The worker's own claim and outcome commits sent JOBS to nobody and DONE only to
        # subscribers: a worker is not woken by other workers finishing.
        assert jobs_only.n == 0


def test_a_datagram_without_a_commit_wakes_nobody(
    sqlite_path: str, listening: Callable[..., tuple[Calls, Any]]
) -> None:
    with errands.Queue(sqlite_path) as q:
        calls, listener = listening(q)
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
            for _ in range(20):
                s.sendto(wakeup.JOBS, listener.address)
        time.sleep(QUIET)
        assert calls.n == 0, "a stray datagram woke the listener: data_version must confirm"
        q.enqueue("t", {})
        assert calls.event.wait(10)


def test_the_applications_own_writes_send_no_wake_up(
    sqlite_path: str, listening: Callable[..., tuple[Calls, Any]]
) -> None:
    with errands.Queue(sqlite_path) as q:
        calls, _ = listening(q)
        app = sqlite3.connect(sqlite_path, isolation_level=None)
        try:
            app.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, item TEXT)")
            for n in range(200):
                app.execute("INSERT INTO orders (item) VALUES (?)", (f"item {n}",))
        finally:
            app.close()
        time.sleep(QUIET)
        assert calls.n == 0, f"200 application writes woke the listener {calls.n} times"


def test_the_fallback_check_sees_jobs_written_by_plain_sql(sqlite_path: str) -> None:
    # With the default fallback: a job inserted by SQL outside errands sends no datagram, and
    # the listener's slow data_version check still notices the commit.
    with errands.Queue(sqlite_path) as q:
        calls = Calls()
        listener = q.backend.listen(calls)
        try:
            time.sleep(0.1)
            app = sqlite3.connect(sqlite_path, isolation_level=None)
            try:
                app.execute("INSERT INTO jobs (type, run_at, created_at) VALUES ('t', 0, 0)")
            finally:
                app.close()
            assert calls.event.wait(10)
        finally:
            listener.close()


def test_a_closed_listener_leaves_no_socket_behind(
    sqlite_path: str, listening: Callable[..., tuple[Calls, Any]]
) -> None:
    if not wakeup.supported():
        pytest.skip("no abstract Unix sockets here: the polling listener binds nothing")
    with errands.Queue(sqlite_path) as q:
        key = wakeup.database_key(sqlite_path)
        assert key is not None
        _, listener = listening(q)
        found = wakeup.listeners(key)
        assert found[wakeup.WORKER] == [listener.address]
        listener.close()
        wait_for(lambda: not wakeup.listeners(key)[wakeup.WORKER], what="the socket to go")
        q.enqueue("t", {})  # a send to a listener that is gone is not an error


def test_a_killed_worker_process_leaves_no_socket_behind(sqlite_path: str) -> None:
    if not wakeup.supported():
        pytest.skip("no abstract Unix sockets here: the polling listener binds nothing")
    errands.Queue(sqlite_path).close()
    key = wakeup.database_key(sqlite_path)
    assert key is not None
    code = (
        "import sys, time, errands\n"
        "q = errands.Queue(sys.argv[1])\n"
        "q.backend.listen(lambda: None)\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, sqlite_path], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        assert len(wakeup.listeners(key)[wakeup.WORKER]) == 1
    finally:
        proc.kill()
        proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()
    wait_for(lambda: not wakeup.listeners(key)[wakeup.WORKER], what="the socket to go")


def test_listen_for_work_hears_this_queues_enqueues_and_other_processes(
    queue: errands.Queue, no_fallback: None
) -> None:
    # Queue._listen_for_work is what a worker subscribes with: its own process's enqueues
    # call back at once, another process's through the database's channel; after close()
    # neither does.
    calls = Calls()
    listener = queue._listen_for_work(calls)
    try:
        connected = getattr(listener, "connected", None)
        if connected is not None:
            assert connected.wait(10)
        time.sleep(0.1)
        queue.enqueue("t", {})
        assert calls.event.wait(10), "this Queue's own enqueue did not call back"
        calls.event.clear()
        subprocess.run([sys.executable, "-c", PRODUCER, queue.url], check=True, timeout=60)
        assert calls.event.wait(10), "another process's enqueue did not call back"
    finally:
        listener.close()
    before = calls.n
    queue.enqueue("t", {})
    time.sleep(QUIET)
    assert calls.n == before, "a closed subscription still called back"


# -- the one wake-up hook (host.SQLHost._woke): every write that makes jobs claimable wakes an
# idle worker's listener once it commits, on both backends -----------------------------------


def test_each_operator_write_that_makes_work_claimable_wakes_an_idle_worker(
    make_queue: Callable[..., errands.Queue], listening: Callable[..., tuple[Calls, Any]]
) -> None:
    from helpers.support import FixedClock, claim

    clock = FixedClock()
    q = make_queue(clock=clock)
    failed, later = q.enqueue("t", {}), q.enqueue("t", {})
    q.backend.cancel([failed], "test", clock())  # cancelled: retryable
    lost = q.enqueue("t", {}, priority=9)  # claimed first below, its lease then lost
    (claimed,) = claim(q, ["t"], worker_id="gone", lease_seconds=30, limit=1)
    assert claimed.id == lost
    scheduled = q.enqueue("t", {}, delay=3600)
    q.pause("slow")
    q.set_limit("api", running=0)

    writes: list[tuple[str, Callable[[], object]]] = [
        ("retry", lambda: q.retry(failed)),
        ("run now", lambda: q.run_now(scheduled)),
        ("priority", lambda: q.set_priority(5, later)),
        ("resume", lambda: q.resume("slow")),
        ("a raised limit", lambda: q.set_limit("api", running=3)),
        ("a cleared limit", lambda: q.clear_limit("api")),
        ("a recovered lease", lambda: (clock.advance(60), q.backend.rescue(clock()))),
    ]
    calls, _ = listening(q)
    time.sleep(wakeup.REFRESH + 0.1)  # SQLite: this Queue's sender has cached its peers
    for what, write in writes:
        calls.event.clear()
        write()
        assert calls.event.wait(10), f"{what} woke no idle worker"


def test_a_cancel_wakes_a_waiter_at_once(
    make_queue: Callable[..., errands.Queue], no_fallback: None
) -> None:
    q = make_queue()
    job_id = q.enqueue("t", {})
    done = Calls()
    listener = q.backend.listen_finished(lambda _ids: done())
    try:
        if hasattr(listener, "connected"):
            assert listener.connected.wait(10)
        time.sleep(wakeup.REFRESH + 0.1)  # SQLite: this Queue's sender has cached its peers
        q.cancel(job_id)
        assert done.event.wait(10), "a cancel told no waiter that the job is final"
    finally:
        listener.close()


def test_a_chain_a_batch_and_an_after_job_wake_an_idle_worker(
    make_queue: Callable[..., errands.Queue], listening: Callable[..., tuple[Calls, Any]]
) -> None:
    # Their first jobs are due at once: an idle worker must not wait for its poll interval
    # (SQLite sent no datagram for enqueues that carry dependencies).
    q = make_queue()
    done = q.enqueue("t", {})
    q.cancel(done)
    calls, _ = listening(q)
    time.sleep(wakeup.REFRESH + 0.1)  # SQLite: this Queue's sender has cached its peers

    def batch() -> None:
        with q.batch(on_complete=("cb", {})) as b:
            b.enqueue("m", {})

    for what, write in (
        ("a chain", lambda: q.chain([("a", {}), ("b", {})])),
        ("a batch", batch),
        (
            "a job after a final one",
            lambda: q.enqueue("c", {}, after=[done], on_upstream_failure="run"),
        ),
    ):
        calls.event.clear()
        write()
        assert calls.event.wait(10), f"{what} woke no idle worker"
