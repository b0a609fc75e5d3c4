"""Fixtures for the contract tests.

Every behaviour test takes ``db_url`` (directly or through ``queue`` / ``make_queue``), so it
runs once per backend: ``sqlite`` (a fresh file under tmp_path) and ``postgres`` (the server
named by ``ERRANDS_TEST_POSTGRES_URL``; required in CI, skipped with a reason elsewhere).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import errands
from support import FixedClock

POSTGRES_ENV = "ERRANDS_TEST_POSTGRES_URL"


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "jobs.db")
    url = os.environ.get(POSTGRES_ENV)
    if not url:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{POSTGRES_ENV} must be set in CI")
        pytest.skip(f"PostgreSQL tests need {POSTGRES_ENV}=postgresql://...; skipped")
    try:
        importlib.import_module("errands.backends.postgres")
    except ImportError as exc:
        pytest.skip(f"errands.backends.postgres is not importable yet ({exc}); skipped")
    # TODO(postgres helper): give each test a fresh database (create one per test from
    # ERRANDS_TEST_POSTGRES_URL and drop it afterwards) so tests never see each other's jobs.
    return url


@pytest.fixture
def is_sqlite(db_url: str) -> bool:
    return not db_url.startswith(("postgresql://", "postgres://"))


@pytest.fixture
def sqlite_path(tmp_path: Path) -> str:
    """For the SQLite-only tests: a fresh file path, no backend parametrization."""
    return str(tmp_path / "jobs.db")


@pytest.fixture
def make_queue(db_url: str) -> Iterator[Callable[..., errands.Queue]]:
    """Build Queues on this test's database (several may share it: a producer and a worker);
    every one is closed after the test."""
    opened: list[errands.Queue] = []

    def make(**kwargs: Any) -> errands.Queue:
        q = errands.Queue(db_url, **kwargs)
        opened.append(q)
        return q

    yield make
    for q in opened:
        q.close()


@pytest.fixture
def queue(make_queue: Callable[..., errands.Queue]) -> errands.Queue:
    return make_queue()


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock()


@pytest.fixture
def clocked_queue(make_queue: Callable[..., errands.Queue], clock: FixedClock) -> errands.Queue:
    """A Queue whose time is ``clock``: it moves only on ``clock.advance(seconds)``."""
    return make_queue(clock=clock)
