"""Helpers for the runtime fault tests: real worker processes, their ledgers, and checks of
the database's invariants that read the public tables (the same SQL on every backend)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import errands
from helpers.support import event_names as event_names  # re-exported for the runtime tests
from helpers.support import is_sqlite

APP = Path(__file__).with_name("worker_app.py")
LEASE = 2.0  # the worker app's default lease_seconds
SWEEP = min(LEASE / 2, 5.0)  # errands.maintenance: the rescuer sweeps this often
RECOVERY_BOUND = LEASE + SWEEP + 1.0  # docs/runtime.md, recovery bound: lease + sweep + 1 s
FAULT_EXIT = 86  # errands.core.faults.FAULT_EXIT_CODE
KILL_EXIT = 87  # worker_app: a handler that killed its own process


HERE = Path(__file__).parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The long versions run only when asked for (``-m slow``): CI runs the fast ones."""
    if "slow" in (config.getoption("markexpr") or ""):
        return
    skip = pytest.mark.skip(reason="long version: run with -m slow")
    for item in items:
        if "slow" in item.keywords and HERE in item.path.parents:
            item.add_marker(skip)


def sqlite_path(url: str) -> str:
    return url[len("sqlite:///") :] if url.startswith("sqlite:///") else url


@contextlib.contextmanager
def raw_connection(url: str) -> Iterator[Any]:
    """A plain DB-API connection for reading the public tables (autocommit)."""
    if is_sqlite(url):
        conn = sqlite3.connect(sqlite_path(url), timeout=30, isolation_level=None)
        try:
            yield conn
        finally:
            conn.close()
    else:
        import psycopg

        with psycopg.connect(url, autocommit=True) as pg:
            yield pg


def rows(url: str, query: str) -> list[tuple[Any, ...]]:
    """Run a parameterless query written in SQL both backends accept."""
    with raw_connection(url) as conn:
        return [tuple(r) for r in conn.execute(query).fetchall()]


def snapshot_rows(url: str, *queries: str) -> list[list[tuple[Any, ...]]]:
    """Run several queries in ONE read snapshot, so a check across tables never mixes two
    moments of a running system (SQLite: a deferred read transaction; PostgreSQL:
    REPEATABLE READ)."""
    with raw_connection(url) as conn:
        if is_sqlite(url):
            conn.execute("BEGIN")
        else:
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        try:
            return [[tuple(r) for r in conn.execute(q).fetchall()] for q in queries]
        finally:
            conn.execute("ROLLBACK")


def assert_integrity(url: str) -> None:
    """PRAGMA integrity_check on SQLite; nothing to check on other backends."""
    if not is_sqlite(url):
        return
    with raw_connection(url) as conn:
        result = conn.execute("PRAGMA integrity_check").fetchall()
    assert result == [("ok",)], f"integrity_check: {result}"


@contextlib.contextmanager
def write_lock(url: str) -> Iterator[None]:
    """Hold the database's write lock (SQLite: BEGIN IMMEDIATE) until the block ends."""
    if not is_sqlite(url):
        pytest.skip("holding the write lock is only implemented for SQLite")
    conn = sqlite3.connect(sqlite_path(url), timeout=30, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        yield
        conn.execute("ROLLBACK")
    finally:
        conn.close()


def write_lock_free(url: str) -> bool:
    """Whether a writer could take the write lock right now (always True off SQLite)."""
    if not is_sqlite(url):
        return True
    conn = sqlite3.connect(sqlite_path(url), timeout=0.2, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        conn.close()


def wait_for(check: Callable[[], Any], timeout: float, what: str, every: float = 0.02) -> Any:
    """Poll until ``check()`` is truthy (and return it), or fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(every)


def _detail(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    return json.loads(value) if isinstance(value, str | bytes) else dict(value)


# -- processes --------------------------------------------------------------------------------


@dataclass
class Proc:
    """A worker_app process with its stdout/stderr in files (pipes could fill and block)."""

    popen: subprocess.Popen[bytes]
    out: Path
    err: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            os.kill(self.pid, sig)

    def wait(self, timeout: float = 30) -> int:
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            os.kill(self.pid, signal.SIGUSR1)  # worker_app dumps every thread's stack
            time.sleep(0.5)
            raise AssertionError(
                f"process {self.pid} still running after {timeout}s; stderr:\n{self.stderr()}"
            ) from None

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM and wait (graceful shutdown)."""
        self.signal(signal.SIGTERM)
        return self.wait(timeout)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        self.popen.wait(10)

    def stdout(self) -> str:
        return self.out.read_text()

    def stderr(self) -> str:
        return self.err.read_text()

    def summary(self) -> dict[str, Any]:
        lines = [ln for ln in self.stdout().splitlines() if ln.startswith("{")]
        assert lines, f"no summary from worker {self.pid}; stderr:\n{self.stderr()}"
        result: dict[str, Any] = json.loads(lines[-1])
        return result

    def assert_clean_log(self) -> None:
        """No traceback and nothing at ERROR level reached the log."""
        text = self.stderr()
        bad = [ln for ln in text.splitlines() if ln.startswith(("ERROR", "CRITICAL"))]
        assert "Traceback" not in text and not bad, f"worker {self.pid} logged errors:\n{text}"


@dataclass
class Cluster:
    """Starts worker_app processes for one test and makes sure none outlives it."""

    db_url: str
    root: Path
    procs: list[Proc] = field(default_factory=list)

    @property
    def ledger_dir(self) -> Path:
        return self.root / "ledger"

    def start(
        self,
        role: str = "worker",
        *args: str,
        env: dict[str, str] | None = None,
        ledger: bool = True,
        cwd: Path | None = None,
    ) -> Proc:
        n = len(self.procs)
        out, err = self.root / f"{role}-{n}.out", self.root / f"{role}-{n}.err"
        cmd = [sys.executable, str(APP), role, "--db", self.db_url, *args]
        if ledger and role == "worker":
            cmd += ["--ledger", str(self.ledger_dir)]
        full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        if env is None or "ERRANDS_FAULT" not in env:
            full_env.pop("ERRANDS_FAULT", None)
        with out.open("wb") as o, err.open("wb") as e:
            popen = subprocess.Popen(cmd, stdout=o, stderr=e, env=full_env, cwd=cwd)
        proc = Proc(popen, out, err)
        self.procs.append(proc)
        return proc

    def worker(self, *args: str, env: dict[str, str] | None = None) -> Proc:
        return self.start("worker", *args, env=env)

    def wait_registered(self, proc: Proc, timeout: float = 20) -> None:
        """Wait until a worker has registered (so its signal handlers are installed)."""

        def registered() -> bool:
            assert proc.alive(), f"worker {proc.pid} exited early:\n{proc.stderr()}"
            return proc.pid in worker_pids(self.db_url)

        wait_for(registered, timeout, f"worker {proc.pid} to register")

    def ledger(self) -> list[dict[str, Any]]:
        return read_ledger(self.ledger_dir)

    def close(self) -> None:
        for proc in self.procs:
            if proc.alive():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGCONT)
                    os.kill(proc.pid, signal.SIGKILL)
                proc.popen.wait(10)


@pytest.fixture
def cluster(db_url: str, tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(db_url, tmp_path)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def queue(db_url: str) -> Iterator[errands.Queue]:
    """The test's own Queue: no tasks registered, so it can enqueue any type."""
    with errands.Queue(db_url, lease_seconds=LEASE) as q:
        yield q


def read_ledger(directory: Path) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = []
    if not directory.exists():
        return entries
    for path in sorted(directory.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            entries.append(json.loads(line))
    return entries


def starts(ledger: Sequence[dict[str, Any]], seq: int | None = None) -> list[dict[str, Any]]:
    return [e for e in ledger if e["phase"] == "start" and (seq is None or e["seq"] == seq)]


def phases(ledger: Sequence[dict[str, Any]], seq: int) -> list[tuple[int, str]]:
    """(attempt, phase) of one job's ledger lines, in the order they were written."""
    mine = sorted((e for e in ledger if e["seq"] == seq), key=lambda e: e["t"])
    return [(e["attempt"], e["phase"]) for e in mine]


# -- database invariants ----------------------------------------------------------------------


def status_counts(url: str) -> Counter[str]:
    return Counter(
        {s: n for s, n in rows(url, "SELECT status, COUNT(*) FROM jobs GROUP BY status")}
    )


def assert_consistent(url: str) -> dict[int, str]:
    """Check that every job's row, attempt rows and events tell the same story, so nothing
    was half-applied. Returns each job's status."""
    jobs, attempt_rows, event_rows = snapshot_rows(
        url,
        "SELECT id, status, attempts, worker_id, lease_expires_at FROM jobs",
        "SELECT job_id, attempt, status, finished_at, error_code FROM job_attempts "
        "ORDER BY job_id, attempt",
        "SELECT job_id, event, detail FROM job_events ORDER BY id",
    )
    attempts: dict[int, list[tuple[int, str, Any, Any]]] = defaultdict(list)
    for job_id, n, status, finished, code in attempt_rows:
        attempts[job_id].append((n, status, finished, code))
    events: dict[int, list[tuple[str, dict[str, Any]]]] = defaultdict(list)
    for job_id, event, info in event_rows:
        events[job_id].append((event, _detail(info)))

    problems: list[str] = []
    states: dict[int, str] = {}
    for job_id, status, n_attempts, worker_id, lease in jobs:
        states[job_id] = status
        mine = attempts.get(job_id, [])
        evs = events.get(job_id, [])
        names = Counter(e for e, _ in evs)
        by_status = Counter(s for _, s, _, _ in mine)

        found: list[str] = []
        bad = found.append

        if [a[0] for a in mine] != list(range(1, n_attempts + 1)):
            bad(f"attempt rows are not 1..{n_attempts}")
        for number, a_status, finished, _ in mine:
            if (a_status == "running") != (finished is None):
                bad(f"attempt {number} is {a_status} with finished_at={finished}")
        if status == "running":
            if by_status["running"] != 1 or not mine or mine[-1][1] != "running":
                bad("running without exactly one open (last) attempt")
            if worker_id is None or lease is None:
                bad("running without an owner and a lease")
        elif by_status["running"]:
            bad("an attempt row is still open")
        last = mine[-1][1] if mine else None
        if status == "succeeded" and last != "succeeded":
            bad("succeeded but its last attempt is not")
        if status == "failed" and last not in ("failed", "lost"):
            bad("failed but its last attempt neither failed nor was lost")
        if not evs or evs[0][0] not in ("ENQUEUED", "WAITING"):
            bad("history does not start with ENQUEUED (or WAITING: enqueued after=[…])")
        if names["READY"] > 1 or (names["WAITING"] and n_attempts and names["READY"] != 1):
            bad("a dependent ran without exactly one READY (released once)")
        # A release, a durable sleep and a signal wait give the claim's attempt back.
        given_back = names["RELEASED"] + names["SLEEPING"] + names["SIGNAL_WAIT"]
        if names["CLAIMED"] - given_back != n_attempts:
            bad("CLAIMED minus RELEASED, SLEEPING and SIGNAL_WAIT differ from attempts")
        if names["SUCCEEDED"] != (status == "succeeded"):
            bad("SUCCEEDED events do not match the state")
        if names["RECOVERED"] != by_status["lost"]:
            bad("RECOVERED events do not match lost attempts")
        if names["FAILED"] + names["RETRY_SCHEDULED"] != by_status["failed"]:
            bad("FAILED + RETRY_SCHEDULED events do not match failed attempts")
        if names["CANCELLED"] != (status == "cancelled"):
            bad("CANCELLED events do not match the state")
        problems.extend(
            f"job {job_id} ({status}): {msg}; attempts={mine} events={evs}" for msg in found
        )
    assert not problems, "inconsistent rows:\n" + "\n".join(problems[:20])
    return states


def worker_pids(url: str) -> set[int]:
    """Pids of the workers registered and not stopped."""
    return {int(r[0]) for r in rows(url, "SELECT pid FROM workers WHERE stopped_at IS NULL")}


def running_owners(url: str) -> list[tuple[int, int]]:
    """(job id, owner pid) of every running job."""
    out = []
    for job_id, worker_id in rows(url, "SELECT id, worker_id FROM jobs WHERE status = 'running'"):
        out.append((job_id, int(str(worker_id).rsplit(":", 2)[1])))
    return out


def figures(capsys: pytest.CaptureFixture[str], name: str, **values: Any) -> None:
    """Print measured figures even when output is captured, so they can be quoted."""
    with capsys.disabled():
        print(f"\n[figures] {name}: " + json.dumps(values))
