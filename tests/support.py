"""Small helpers shared by the contract tests (imported by conftest and test modules)."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Sequence
from typing import Any

import errands
from errands.backends.base import ClaimedJob, ClaimRequest

# A fixed moment well inside the range every backend stores exactly (2027-01-15 08:00 UTC).
EPOCH = 1_800_000_000.0


class FixedClock:
    """A clock that only moves when a test says so: pass it as ``Queue(clock=...)``."""

    def __init__(self, now: float = EPOCH) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        self.now += seconds
        return self.now


def claim(
    q: errands.Queue,
    types: Sequence[str],
    *,
    now: float | None = None,
    limit: int = 1,
    worker_id: str = "w1",
    queues: Sequence[str] | None = None,
    lease_seconds: float = 30.0,
) -> list[ClaimedJob]:
    """Claim through the backend verb, as a worker does."""
    request = ClaimRequest(worker_id, list(types), queues, limit, lease_seconds)
    return q.backend.claim(request, q.clock() if now is None else now)


def wait_for(condition: Callable[[], Any], *, timeout: float = 30.0, what: str = "") -> Any:
    """Poll ``condition`` until it is truthy; fail (not hang) after a generous deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or condition}")
        time.sleep(0.01)


def sql_rows(path: str, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    """Raw SQL on a SQLite file through a plain sqlite3 connection (not errands')."""
    conn = sqlite3.connect(path)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def event_names(q: errands.Queue, job_id: int) -> list[str]:
    return [e.event for e in q.events(job_id)]
