"""Small helpers shared by the contract tests (imported by conftest and test modules)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

import errands
from errands.backends.base import ClaimedJob, ClaimRequest
from errands.testing import FrozenClock
from errands.worker.loop import Worker

# A fixed moment well inside the range every backend stores exactly (2027-01-15 08:00 UTC).
EPOCH = 1_800_000_000.0


class FixedClock(FrozenClock):
    """The clock users get (``errands.testing.FrozenClock``), starting at ``EPOCH`` unless told
    otherwise: pass it as ``Queue(clock=...)``; it moves only on ``advance`` or ``now = …``."""

    def __init__(self, now: float = EPOCH) -> None:
        super().__init__(now)


class SteppingClock:
    """The real wall clock, plus an offset a test can step (as NTP or an operator does)."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset


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


def is_postgres(url: str) -> bool:
    return url.startswith(("postgresql://", "postgres://"))


def is_sqlite(url: str) -> bool:
    return not is_postgres(url)


def sqlite_only(url: str, why: str) -> None:
    """Skip on PostgreSQL, saying why: the test checks something only SQLite has."""
    if is_postgres(url):
        pytest.skip(f"SQLite-specific: {why}")


def _plain(value: Any) -> Any:
    # What SQLite would return: timestamps as unix seconds, numerics as int or float.
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    return value


def sql_rows(url: str, query: str) -> list[tuple[Any, ...]]:
    """Rows of one plain query on the test database through a connection of its own (not
    errands'), read the way SQLite would return them (PostgreSQL: timestamptz → seconds,
    numeric → int/float, jsonb → its JSON text)."""
    if is_sqlite(url):
        conn = sqlite3.connect(url)
        try:
            return conn.execute(query).fetchall()
        finally:
            conn.close()
    import psycopg
    from psycopg.types.json import set_json_loads

    with psycopg.connect(url, autocommit=True) as pg:
        set_json_loads(lambda data: data if isinstance(data, str) else data.decode(), pg)
        return [tuple(_plain(v) for v in row) for row in pg.execute(query).fetchall()]


def first_row(row: tuple[Any, ...] | None) -> tuple[Any, ...]:
    """A cursor's ``fetchone()`` for a query the test knows returns a row."""
    assert row is not None, "the query returned no row"
    return row


def get_job(q: errands.Queue, job_id: int) -> errands.Job:
    """``q.get(job_id)`` for a job the test knows exists (fails, with its id, if not)."""
    job = q.get(job_id)
    assert job is not None, f"job {job_id} does not exist"
    return job


def event_names(q: errands.Queue, job_id: int) -> list[str]:
    return [e.event for e in q.events(job_id)]


CLI_TIMEOUT = 120  # a bound for a hung command, never a performance assertion


def run_cli(
    cwd: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m errands ARGS`` in ``cwd`` (importable from there), warnings as errors, with
    no ``$ERRANDS_DB`` inherited unless ``env`` sets it."""
    base = {k: v for k, v in os.environ.items() if k != "ERRANDS_DB"}
    return subprocess.run(
        [sys.executable, "-W", "error", "-m", "errands", *args],
        cwd=cwd,
        env={**base, "PYTHONPATH": str(cwd), **(env or {})},
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT,
    )


@contextmanager
def stepped(q: errands.Queue, clock: FixedClock, **kwargs: Any) -> Iterator[Worker]:
    """A worker driven one step at a time (``worker.tick(now)``) on ``clock``, its wall and
    monotonic clock alike; stopped and closed after."""
    worker = Worker(q, concurrency=1, handle_signals=False, monotonic=clock, **kwargs)
    worker.start()
    try:
        yield worker
    finally:
        worker.stop()
        worker.close()
