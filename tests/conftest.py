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
import support
from support import FixedClock

POSTGRES_ENV = "ERRANDS_TEST_POSTGRES_URL"


def postgres_base_url() -> str:
    """The server for PostgreSQL tests; required in CI, skipped with a reason elsewhere."""
    url = os.environ.get(POSTGRES_ENV)
    if not url:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{POSTGRES_ENV} is not set but CI=true: the PostgreSQL tests must run")
        pytest.skip(
            f"PostgreSQL tests need {POSTGRES_ENV} (e.g. postgresql://postgres@127.0.0.1/postgres)"
        )
    try:
        importlib.import_module("psycopg")
    except ImportError as exc:
        pytest.skip(f"PostgreSQL tests need the extra: pip install 'errands[postgres]' ({exc})")
    return url


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh, migrated PostgreSQL database for this test (cloned from a template)."""
    from pgtools import fresh_database

    url, drop = fresh_database(postgres_base_url())
    try:
        yield url
    finally:
        drop()


@pytest.fixture
def pg_empty_url() -> Iterator[str]:
    """A fresh PostgreSQL database with no schema at all (migration tests)."""
    from pgtools import fresh_database

    url, drop = fresh_database(postgres_base_url(), migrated=False)
    try:
        yield url
    finally:
        drop()


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "jobs.db")
    url: str = request.getfixturevalue("pg_url")
    return url


@pytest.fixture
def is_sqlite(db_url: str) -> bool:
    return support.is_sqlite(db_url)


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
