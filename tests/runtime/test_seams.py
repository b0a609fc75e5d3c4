"""Issue #20: a worker survives its application's mistakes at the seams of its process —
the app closing the Queue under it, a handler's ``os.chdir``, a handler's ``os.fork`` —
with real worker processes on both backends (docs/runtime.md, "The application's own
process")."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import pytest

import errands
from helpers.support import is_sqlite

from .conftest import (
    KILL_EXIT,
    Cluster,
    assert_consistent,
    assert_integrity,
    rows,
    starts,
    status_counts,
    wait_for,
)

CLOSED_LOG = "the Queue was closed while this worker runs"


def _drain(cluster: Cluster) -> None:
    """A fresh burst worker runs whatever was handed back."""
    proc = cluster.worker("--burst", "--concurrency", "4")
    assert proc.wait(60) == 0, proc.stderr()


# -- 1. the application closes the Queue under its worker ----------------------------------


@pytest.mark.parametrize("how", ["close", "with", "aclose"])
def test_a_handler_closing_the_queue_stops_its_worker_cleanly(
    cluster: Cluster, queue: errands.Queue, how: str
) -> None:
    """q.close() (or `with q:`) inside a handler: no crash, no hot loop — the worker logs
    why, lets running jobs finish, hands prefetched ones back, and stops; nothing is left
    running. (Before: SIGSEGV on SQLite, a hot loop of "pool is already closed" on
    PostgreSQL.)"""
    ids = [queue.enqueue("slow_job", {"seq": i, "seconds": 0.5}) for i in range(3)]
    if how == "aclose":  # an async handler: await q.aclose() on the worker's event loop
        ids.append(queue.enqueue("async_closer_job", {"seq": 3}))
    else:
        ids.append(queue.enqueue("closer_job", {"seq": 3, "how": how}))
    ids += [queue.enqueue("slow_job", {"seq": i, "seconds": 0.5}) for i in range(4, 10)]
    proc = cluster.worker("--concurrency", "4", "--max-prefetch", "8")
    code = proc.wait(60)
    err = proc.stderr()
    assert code == 0, err
    assert CLOSED_LOG in err and "in a handler" in err, err
    assert "postponed" not in err and "Traceback" not in err, err
    summary = proc.summary()
    assert summary["queue_closed"] is True
    counts = status_counts(cluster.db_url)
    assert counts["running"] == 0, counts
    assert queue.get(ids[3]).status == "succeeded"  # type: ignore[union-attr]
    assert_consistent(cluster.db_url)
    assert_integrity(cluster.db_url)
    _drain(cluster)
    assert status_counts(cluster.db_url) == {"succeeded": len(ids)}
    # Every job ran once: the handed-back ones only after the drain.
    assert sorted(e["seq"] for e in starts(cluster.ledger())) == list(range(10))


def test_closing_the_queue_from_another_thread_waits_for_the_worker(
    cluster: Cluster, queue: errands.Queue
) -> None:
    """An application's shutdown closes the Queue while run_worker runs on a thread: close()
    stops the worker gracefully and returns once it has stopped, then closes."""
    for i in range(12):
        queue.enqueue("slow_job", {"seq": i, "seconds": 0.5})
    proc = cluster.start("close-thread", "--concurrency", "2", "--max-prefetch", "4")
    assert proc.wait(60) == 0, proc.stderr()
    out = json.loads(proc.stdout().splitlines()[-1])
    assert out["worker_alive_after_close"] is False, proc.stderr()
    assert out["queue_closed"] is True
    assert out["released"] > 0
    assert status_counts(cluster.db_url)["running"] == 0
    assert_consistent(cluster.db_url)


def test_a_closed_queue_raises_a_clear_error_to_a_worker_still_using_its_backend(
    queue: errands.Queue,
) -> None:
    """Defence in depth: a backend closed under a running worker (bypassing Queue.close)
    stops the worker with QueueClosedError on PostgreSQL instead of retrying forever; on
    SQLite a closed backend reopens on next use, so the worker carries on."""

    @queue.task
    def noop() -> None:
        return None

    queue.enqueue("noop", {})
    queue.backend.close()
    if is_sqlite(queue.url):
        summary = queue.run_worker(burst=True, handle_signals=False)
        assert summary.succeeded == 1
        return
    with pytest.raises(errands.errors.QueueClosedError, match="closed"):
        queue.run_worker(burst=True, handle_signals=False)


def test_sqlite_close_never_closes_a_connection_in_use(tmp_path: Path) -> None:
    """close() from one thread while others write: the busy connections close when their
    use ends, never under a running statement (sqlite3 would crash the interpreter)."""
    code = f"""
import threading, errands
q = errands.Queue({str(tmp_path / "t.db")!r})
stop = threading.Event()
errors = []
def produce():
    while not stop.is_set():
        try:
            q.enqueue("x", {{"n": 1}})
        except Exception as exc:  # a clear error is fine; a crash is not
            errors.append(type(exc).__name__)
threads = [threading.Thread(target=produce) for _ in range(4)]
for t in threads: t.start()
for _ in range(300):
    q.close()
stop.set()
for t in threads: t.join()
q.close()
print("OK", len(errors))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("OK"), done.stdout


def _app(tmp_path: Path, body: str) -> Path:
    (tmp_path / "seam_app.py").write_text(
        "import os, time, errands\n"
        "q = errands.Queue(os.environ['APP_DB'], lease_seconds=5, heartbeat_seconds=1)\n" + body
    )
    return tmp_path


def _cli_worker(
    tmp_path: Path, db_url: str, *args: str, name: str = "worker", nohup: bool = False
) -> tuple[subprocess.Popen[bytes], Path]:
    err = tmp_path / f"{name}.err"
    with err.open("wb") as e:
        proc = subprocess.Popen(
            [sys.executable, "-m", "errands", "worker", "--app", "seam_app", *args],
            cwd=tmp_path,
            env={**os.environ, "APP_DB": db_url, "PYTHONUNBUFFERED": "1"},
            stdout=subprocess.DEVNULL,
            stderr=e,
            preexec_fn=_ignore_sighup if nohup else None,
        )
    return proc, err


def _ignore_sighup() -> None:
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # what nohup does before exec


def test_the_cli_worker_exits_1_when_its_app_closes_the_queue(tmp_path: Path, db_url: str) -> None:
    _app(tmp_path, "@q.task\ndef closer() -> None:\n    q.close()\n")
    with errands.Queue(db_url) as q:
        job = q.enqueue("closer", {})
        proc, err = _cli_worker(tmp_path, db_url)
        try:
            code = proc.wait(60)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert code == 1, err.read_text()
        assert "the application closed its Queue" in err.read_text()
        assert q.get(job).status == "succeeded"  # type: ignore[union-attr]


# -- 2. a handler's os.chdir with a relative database path ---------------------------------


def test_a_handler_changing_directory_does_not_stop_a_worker_on_a_relative_path(
    tmp_path: Path, db_url: str
) -> None:
    if not is_sqlite(db_url):
        pytest.skip("a relative path is a SQLite file's")
    home = tmp_path / "home"
    home.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    cluster = Cluster("app.db", tmp_path)
    try:
        with errands.Queue(str(home / "app.db")) as q:
            q.enqueue("chdir_job", {"seq": 0, "to": str(elsewhere)})
            # Long enough for the worker's periodic identity check (every lease/3) to run.
            q.enqueue("slow_job", {"seq": 1, "seconds": 2.0})
            for i in range(2, 11):
                q.enqueue("ledger_job", {"seq": i, "ms": 20})
            proc = cluster.start("worker", "--concurrency", "2", "--burst", cwd=home)
            code = proc.wait(60)
            err = proc.stderr()
            assert code == 0, err
            assert "Traceback" not in err and "replaced" not in err and "deleted" not in err, err
            assert status_counts(str(home / "app.db")) == {"succeeded": 11}
            assert not (elsewhere / "app.db").exists()
    finally:
        cluster.close()


def test_the_listener_survives_a_database_it_cannot_open(tmp_path: Path) -> None:
    """A listener thread whose connection fails logs and ends: no unhandled exception in
    thread errands-listener (pytest turns one into an error)."""
    path = tmp_path / "gone.db"
    with errands.Queue(str(path)) as q:
        path.unlink()
        listener = q.backend.listen(lambda: None)
        try:
            time.sleep(0.3)
        finally:
            listener.close()


def _exited(pid: int) -> bool:
    """Gone, or a zombie its parent has not reaped yet: not running anything."""
    return _pid_state(pid) in (None, "Z")


# -- 3. a job that kills its worker -------------------------------------------------------


def test_a_job_that_kills_its_worker_costs_its_neighbours_at_most_one_attempt(
    cluster: Cluster, queue: errands.Queue
) -> None:
    """A poison job (os._exit every attempt, max_attempts 3) beside three healthy one-second
    jobs, the worker restarted after each death as systemd would: the poison fails alone,
    each neighbour loses at most the one attempt it shared with the poison's first run."""
    poison = queue.enqueue("killer_job", {"seq": 0}, max_attempts=3)
    healthy = [queue.enqueue("slow_job", {"seq": i, "seconds": 1.0}) for i in (1, 2, 3)]
    deaths = 0
    for _ in range(12):
        proc = cluster.worker("--concurrency", "4", "--burst")
        code = proc.wait(120)
        if code == 0:
            break
        assert code == KILL_EXIT, proc.stderr()
        deaths += 1
    else:
        raise AssertionError("the queue never drained")
    assert deaths == 3  # one per attempt of the poison, none more
    job = queue.get(poison)
    assert job is not None and job.status == "failed" and job.error_code == "LOST:LEASE_EXPIRED"
    for job_id in healthy:
        attempts = queue.attempts(job_id)
        assert queue.get(job_id).status == "succeeded"  # type: ignore[union-attr]
        lost = [a for a in attempts if a.status == "lost"]
        assert len(lost) <= 1, attempts
    assert_consistent(cluster.db_url)


# -- 4. os.fork() in a handler --------------------------------------------------------------


def _pid_state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def test_a_forked_child_runs_no_other_job_and_exits(cluster: Cluster, queue: errands.Queue) -> None:
    queue.enqueue("fork_job", {"seq": 0})
    for i in range(1, 13):
        queue.enqueue("ledger_job", {"seq": i, "ms": 30})
    proc = cluster.worker("--concurrency", "2", "--max-prefetch", "8")
    try:
        wait_for(
            lambda: status_counts(cluster.db_url)["succeeded"] == 13, 60, "every job to finish"
        )
        ledger = cluster.ledger()
        children = {e["pid"] for e in ledger if e.get("child")}
        assert len(children) == 1, ledger
        (child,) = children
        # The child wrote its "forked" line and nothing else: no other job ran in it.
        assert [e["phase"] for e in ledger if e["pid"] == child] == ["forked"], ledger
        # Each job started once, all in the worker itself.
        assert sorted(e["seq"] for e in starts(ledger)) == list(range(13))
        assert {e["pid"] for e in starts(ledger)} == {proc.pid}
        # The child does not linger: gone, or a zombie its parent has not reaped yet.
        wait_for(partial(_exited, child), 10, "the forked child to exit")
        assert queue.get(1).status == "succeeded"  # type: ignore[union-attr]
        assert proc.alive()
    finally:
        assert proc.stop() == 0, proc.stderr()
    assert "Traceback" not in proc.stderr(), proc.stderr()
    assert_consistent(cluster.db_url)


# -- 5. signals ---------------------------------------------------------------------------


SLOW_APP = (
    "@q.task\ndef nap(s: float) -> None:\n    time.sleep(s)\n"
    "@q.task\ndef noop() -> None:\n    return None\n"
)


def test_sighup_stops_a_worker_gracefully_and_sigusr1_is_ignored(
    tmp_path: Path, db_url: str
) -> None:
    _app(tmp_path, SLOW_APP)
    with errands.Queue(db_url) as q:
        running = q.enqueue("nap", {"s": 1.0})
        proc, err = _cli_worker(tmp_path, db_url, "--concurrency", "1")
        try:
            wait_for(
                lambda: (j := q.get(running)) is not None and j.status == "running",
                30,
                "the job to start",
            )
            waiting = q.enqueue("nap", {"s": 0.1})
            proc.send_signal(signal.SIGUSR1)
            wait_for(lambda: "SIGUSR1" in err.read_text(), 10, "the SIGUSR1 log line")
            assert proc.poll() is None, err.read_text()
            proc.send_signal(signal.SIGHUP)
            code = proc.wait(60)
        finally:
            if proc.poll() is None:
                proc.kill()
        text = err.read_text()
        assert code == 0, text
        assert "SIGHUP: finishing running jobs, then stopping" in text, text
        assert "SIGUSR1 ignored" in text, text
        assert q.get(running).status == "succeeded"  # type: ignore[union-attr]
        assert q.get(waiting).status in ("queued", "succeeded")  # type: ignore[union-attr]
        assert status_counts(db_url)["running"] == 0


def test_children_stop_gracefully_when_their_supervisor_is_killed(
    tmp_path: Path, db_url: str
) -> None:
    _app(tmp_path, SLOW_APP)
    with errands.Queue(db_url) as q:
        proc, err = _cli_worker(tmp_path, db_url, "--processes", "2", name="supervisor")
        try:
            children = wait_for(
                lambda: len(pids := _live_pids(db_url)) == 2 and pids,
                60,
                "two worker processes",
            )
            job = q.enqueue("nap", {"s": 1.0})
            wait_for(
                lambda: (j := q.get(job)) is not None and j.status == "running",
                30,
                "the job to start",
            )
            proc.kill()
            proc.wait(10)
            # Each child notices, stops gracefully (its running job finishes) and says so.
            wait_for(lambda: not _live_pids(db_url), 60, "the children to stop")
            for pid in children:
                wait_for(partial(_exited, pid), 30, f"child {pid} to exit")
        finally:
            if proc.poll() is None:
                proc.kill()
        assert q.get(job).status == "succeeded", err.read_text()  # type: ignore[union-attr]
        assert "SIGTERM: finishing running jobs" in err.read_text()


def _live_pids(db_url: str) -> set[int]:
    from .conftest import worker_pids

    return worker_pids(db_url)


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_forked_child_never_uses_the_parents_connections(queue: errands.Queue) -> None:
    """A Queue used before os.fork(): the child's enqueue and close go through connections
    of its own; the parent's connections (a PostgreSQL session, an SQLite handle) are left
    untouched and keep working."""
    queue.enqueue("x", {"n": 0})  # the parent's connection is open
    sessions = _sessions(queue.url)
    inherited = _sqlite_connections(queue)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            queue.enqueue("x", {"n": 1})
            # SQLite shows nothing outside the process: look at which handles were used.
            code = 3 if inherited & _sqlite_connections(queue) else 0
            queue.close()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    # Closing in the child ended none of the parent's sessions (PostgreSQL shows them).
    assert sessions <= _sessions(queue.url)
    queue.enqueue("x", {"n": 2})  # the parent's session is still its own
    assert sorted(j.payload["n"] for j in queue.jobs(type="x")) == [0, 1, 2]


def _sessions(url: str) -> set[int]:
    """The server pids of errands' sessions on this test's database (none on SQLite)."""
    if is_sqlite(url):
        return set()
    query = (
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
        "AND application_name = 'errands' AND pid <> pg_backend_pid()"
    )
    return {int(r[0]) for r in rows(url, query)}


def _sqlite_connections(queue: errands.Queue) -> set[int]:
    """Ids of the sqlite3 connections the SQLite backend holds (none on PostgreSQL)."""
    held = getattr(queue.backend, "_all", [])
    return {id(h.conn) for h in held}


def test_a_worker_started_under_nohup_keeps_ignoring_sighup(tmp_path: Path, db_url: str) -> None:
    """nohup (SIGHUP ignored before exec) is the user's choice: SIGHUP does not stop it."""
    _app(tmp_path, SLOW_APP)
    with errands.Queue(db_url) as q:
        proc, err = _cli_worker(tmp_path, db_url, "--concurrency", "1", nohup=True)
        try:
            wait_for(lambda: _live_pids(db_url), 60, "the worker to register")
            proc.send_signal(signal.SIGHUP)
            job = q.enqueue("noop", {})
            wait_for(
                lambda: (j := q.get(job)) is not None and j.status == "succeeded",
                30,
                "the job to run after SIGHUP",
            )
            assert proc.poll() is None, err.read_text()
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(60) == 0, err.read_text()
        finally:
            if proc.poll() is None:
                proc.kill()
        assert "SIGHUP" not in err.read_text()
