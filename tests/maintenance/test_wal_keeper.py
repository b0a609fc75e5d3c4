"""The WAL under a long reader: a real second connection holds a read transaction on a real
SQLite file while jobs are written; the worker's ``WalKeeper`` cannot truncate the WAL (and
says so on its registry row), ``stats`` and ``check`` warn naming the cause, and once the
reader ends the next pass truncates it. On PostgreSQL the keeper has nothing to do."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import errands
from errands.maintenance.wal import WAL_INTERVAL, WAL_LARGE_BYTES, WalKeeper
from errands.worker import Worker
from helpers.support import FixedClock, is_sqlite, sqlite_only, stepped

MakeQueue = Callable[..., errands.Queue]
BIG = "x" * 900_000  # a payload just under max_payload_bytes: 20 of them pass the threshold


def keeper_of(worker: Worker) -> WalKeeper:
    (keeper,) = [s for s in worker._maintenance.services if isinstance(s, WalKeeper)]
    return keeper


def check(db: str, command: str = "check") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "ERRANDS_DB"}
    return subprocess.run(
        [sys.executable, "-m", "errands", "--db", db, command],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_wal_grown_under_a_reader_is_reported_then_truncated_once_it_ends(
    make_queue: MakeQueue, db_url: str, clock: FixedClock
) -> None:
    sqlite_only(db_url, "a WAL file and a second connection holding a read snapshot")
    q = make_queue(clock=clock)

    @q.task
    def store(blob: str) -> None:
        pass

    reader = sqlite3.connect(db_url, isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT COUNT(*) FROM jobs").fetchall()  # holds this snapshot
    q.enqueue_many([("store", {"blob": BIG}) for _ in range(20)])
    wal = db_url + "-wal"
    assert os.path.getsize(wal) > WAL_LARGE_BYTES

    with stepped(q, clock) as worker:
        worker.tick(clock.now)  # maintenance: the keeper tries, and is blocked
        keeper = keeper_of(worker)
        assert keeper.blocked == 1 and keeper.truncated == 0
        clock.advance(q.settings.heartbeat_seconds)
        worker.tick(clock.now)  # a second blocked try, and the heartbeat writes the count
        assert keeper.blocked == 2
        assert os.path.getsize(wal) > WAL_LARGE_BYTES

        warning = q.stats()["wal"]["warning"]
        assert warning is not None
        assert "checkpoints keep failing (2 attempt(s) in a row" in warning
        assert "read transaction" in warning and "end that transaction" in warning
        r = check(db_url)
        assert r.returncode == 1 and "read transaction" in r.stdout, (r.stdout, r.stderr)

        reader.execute("COMMIT")  # the reader lets go
        reader.close()
        clock.advance(WAL_INTERVAL)
        worker.tick(clock.now)
        assert keeper.truncated == 1 and keeper.blocked == 0
        assert os.path.getsize(wal) < WAL_LARGE_BYTES
        assert q.stats()["wal"]["warning"] is None
    assert "WAL" not in check(db_url).stdout
    assert len(q.jobs(type="store")) == 20  # nothing was lost on the way


def test_a_large_wal_left_behind_is_reported_without_a_worker(
    make_queue: MakeQueue, db_url: str
) -> None:
    sqlite_only(db_url, "a WAL file and a second connection holding a read snapshot")
    q = make_queue()
    reader = sqlite3.connect(db_url, isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT COUNT(*) FROM jobs").fetchall()
    q.enqueue_many([("store", {"blob": BIG}) for _ in range(20)])
    reader.execute("COMMIT")  # the reader ended, but no worker runs to truncate the WAL
    stats: dict[str, Any] = q.stats()["wal"]
    assert stats["bytes"] > WAL_LARGE_BYTES and stats["checkpoint_blocked"] == 0
    assert "checkpoints could not complete" in stats["warning"]
    assert "errands vacuum" in stats["warning"]
    shown = check(db_url, "stats").stdout
    assert "WAL       the SQLite WAL is" in shown and "read transaction" in shown
    reader.close()


def test_the_keeper_leaves_a_small_wal_and_postgresql_alone(
    make_queue: MakeQueue, db_url: str
) -> None:
    q = make_queue()
    q.enqueue("store", {"blob": "small"})
    keeper = WalKeeper(q.backend)
    assert keeper.run_once(q.clock()) is None and keeper.blocked == 0
    wal = q.stats()["wal"]
    assert wal["warning"] is None and wal["checkpoint_blocked"] == 0
    assert (wal["bytes"] is None) == (not is_sqlite(db_url))
