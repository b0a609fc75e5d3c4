"""Tasks for the multi-process test: each execution is recorded in a side table through the
task's own sqlite3 connection, so the test can count runs independently of errands' rows."""

from __future__ import annotations

import os
import sqlite3
import threading
import time

import errands

SIDE_TABLE = (
    "CREATE TABLE IF NOT EXISTS executions ("
    "job_id INTEGER NOT NULL, attempt INTEGER NOT NULL, pid INTEGER NOT NULL)"
)


def build(db_path: str) -> errands.Queue:
    q = errands.Queue(db_path)
    local = threading.local()

    def side_conn() -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(db_path, timeout=60, isolation_level=None)
            local.conn = conn
        return conn

    @q.task(name="record", max_attempts=1)
    def record(ctx: errands.JobContext, n: int) -> int:
        side_conn().execute(
            "INSERT INTO executions (job_id, attempt, pid) VALUES (?, ?, ?)",
            (ctx.job_id, ctx.attempt, os.getpid()),
        )
        time.sleep(0.001)  # a little work, so both processes get a share
        return n

    return q
