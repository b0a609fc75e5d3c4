"""Minimal fixtures for the PostgreSQL branch; the lead merges this with the main conftest.

``db_url`` runs a test on both backends: a SQLite file under tmp_path, and a fresh PostgreSQL
database per test on the server named by ERRANDS_TEST_POSTGRES_URL (skipped with a reason when
unset; a failure when CI=true, so CI never silently skips PostgreSQL).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

PG_ENV = "ERRANDS_TEST_POSTGRES_URL"


def postgres_base_url() -> str:
    url = os.environ.get(PG_ENV)
    if not url:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{PG_ENV} is not set but CI=true: the PostgreSQL tests must run in CI")
        pytest.skip(
            f"PostgreSQL tests need {PG_ENV} (e.g. postgresql://postgres@127.0.0.1/postgres)"
        )
    return url


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh, migrated PostgreSQL database for this test."""
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
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield str(tmp_path / "test.db")
    else:
        yield request.getfixturevalue("pg_url")
