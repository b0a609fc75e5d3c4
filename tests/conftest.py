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
from helpers import support as support
from helpers.support import FixedClock

POSTGRES_ENV = "ERRANDS_TEST_POSTGRES_URL"
LOCAL_POSTGRES = "postgresql://postgres@127.0.0.1:5432/postgres"  # what .ci/run starts
HOW_TO = (
    f"set {POSTGRES_ENV}=postgresql://USER@HOST:PORT/DB (a server where USER may CREATE "
    "DATABASE), or run a local server on 127.0.0.1:5432 with trust auth for 'postgres'"
)
_POSTGRES_SKIP: list[str] = []  # why the PostgreSQL half does not run here, if it does not


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def _detect_postgres() -> str | None:
    """Why the PostgreSQL tests cannot run, or None when they can. Without the variable, a
    local server (as .ci/run uses) is found and used, and the variable set for subprocesses."""
    try:
        psycopg = importlib.import_module("psycopg")
    except ImportError as exc:
        return f"psycopg is not installed (pip install -e '.[dev,postgres]': {exc})"
    if os.environ.get(POSTGRES_ENV):
        return None
    if _in_ci():
        return None  # postgres_base_url() fails each test: in CI they must run
    try:
        psycopg.connect(LOCAL_POSTGRES, connect_timeout=2).close()
    except psycopg.Error:
        return f"{POSTGRES_ENV} is not set and no server answers at {LOCAL_POSTGRES}; {HOW_TO}"
    os.environ[POSTGRES_ENV] = LOCAL_POSTGRES
    return None


def pytest_configure(config: pytest.Config) -> None:
    reason = _detect_postgres()
    if reason:
        _POSTGRES_SKIP.append(reason)


def pytest_report_header(config: pytest.Config) -> str:
    if _POSTGRES_SKIP:
        return f"PostgreSQL: the PostgreSQL half of the suite will NOT run: {_POSTGRES_SKIP[0]}"
    return f"PostgreSQL: {os.environ.get(POSTGRES_ENV) or '(required: CI=true)'}"


def _needs_postgres(item: pytest.Item) -> bool:
    callspec = getattr(item, "callspec", None)
    if callspec is not None and callspec.params.get("db_url") == "postgres":
        return True
    names = getattr(item, "fixturenames", ())
    return "pg_url" in names or "pg_empty_url" in names


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Without a server, the PostgreSQL tests are deselected with one stated reason (the
    header and the summary say it), not skipped one line each."""
    if not _POSTGRES_SKIP:
        return
    keep: list[pytest.Item] = []
    drop: list[pytest.Item] = []
    for item in items:
        (drop if _needs_postgres(item) else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
        _POSTGRES_SKIP.append(str(len(drop)))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _POSTGRES_SKIP:
        return
    # In one process the count is known here; under pytest-xdist (make test) the workers
    # collect and deselect, and this controller knows only the reason.
    count = f"{_POSTGRES_SKIP[1]} " if len(_POSTGRES_SKIP) == 2 else "the "
    terminalreporter.write_line(
        f"{count}PostgreSQL tests not run: {_POSTGRES_SKIP[0]}", yellow=True
    )


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
    from helpers.pgtools import fresh_database

    url, drop = fresh_database(postgres_base_url())
    try:
        yield url
    finally:
        drop()


@pytest.fixture
def pg_empty_url() -> Iterator[str]:
    """A fresh PostgreSQL database with no schema at all (migration tests)."""
    from helpers.pgtools import fresh_database

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
def q(db_url: str, clock: FixedClock) -> Iterator[errands.Queue]:
    """A Queue on this test's database whose clock is ``clock`` (the operations tests:
    stats, prune, periodic, metrics, the CLI's reports)."""
    with errands.Queue(db_url, clock=clock) as queue:
        yield queue


@pytest.fixture
def clocked_queue(make_queue: Callable[..., errands.Queue], clock: FixedClock) -> errands.Queue:
    """A Queue whose time is ``clock``: it moves only on ``clock.advance(seconds)``."""
    return make_queue(clock=clock)
