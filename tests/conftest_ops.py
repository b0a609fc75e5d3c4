"""Fixtures for the operations tests (stats, prune, periodic, metrics, CLI).

Test modules load it with ``pytest_plugins = ("conftest_ops",)`` and import builders from
``ops_helpers``. ``db_url`` and ``clock`` are the shared fixtures of tests/conftest.py, so every
operations test runs on both backends (sqlite, and postgres on a fresh migrated database).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import errands
from ops_helpers import Clock


@pytest.fixture
def q(db_url: str, clock: Clock) -> Iterator[errands.Queue]:
    with errands.Queue(db_url, clock=clock) as queue:
        yield queue
