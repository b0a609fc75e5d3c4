"""Fixtures for the operations tests (stats, prune, periodic, metrics, CLI).

Test modules load it with ``pytest_plugins = ("conftest_ops",)`` and import builders from
``ops_helpers``. ``db_url`` is parametrized over backends: SQLite only for now; the PostgreSQL
dialect adds itself here later.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import errands
from ops_helpers import Clock


@pytest.fixture(params=["sqlite"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "jobs.db")
    raise AssertionError(request.param)  # pragma: no cover


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def q(db_url: str, clock: Clock) -> Iterator[errands.Queue]:
    with errands.Queue(db_url, clock=clock) as queue:
        yield queue
