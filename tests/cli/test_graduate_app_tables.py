"""docs/postgres.md, "Your application's own tables in the same file": ``graduate`` moves only
errands' tables, leaves the application's where they are, and a ``connection=`` enqueue that
was not moved along is refused rather than committed apart from the application's rows."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import psycopg
import pytest

import errands
from errands.cli.graduate.copy import TABLES, graduate
from errands.errors import ConfigurationError

ROOT = Path(__file__).resolve().parents[2]


def shared_file(path: Path) -> int:
    """An application's SQLite file holding its own table and errands' queue; one job was
    enqueued in the transaction that wrote the order. Returns that job's id."""
    errands.Queue(str(path)).close()
    conn = sqlite3.connect(path)
    try:
        conn.execute("CREATE TABLE shop_order (id INTEGER PRIMARY KEY, email TEXT)")
        with errands.Queue(str(path)) as q, conn:
            conn.execute("INSERT INTO shop_order (email) VALUES ('a@example.com')")
            return q.enqueue("send_receipt", {"order_id": 1}, connection=conn)
    finally:
        conn.close()


def test_graduate_copies_errands_tables_and_leaves_the_applications(
    tmp_path: Path, pg_empty_url: str
) -> None:
    path = tmp_path / "app.db"
    job_id = shared_file(path)
    report = graduate(str(path), pg_empty_url)
    assert report.ok
    with psycopg.connect(pg_empty_url) as pg:
        tables = {
            r[0]
            for r in pg.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
            )
        }
    assert "shop_order" not in tables  # not created on PostgreSQL
    assert {name for name, _ in TABLES} <= tables
    conn = sqlite3.connect(path)
    try:  # still in the file, unchanged
        assert conn.execute("SELECT id, email FROM shop_order").fetchall() == [(1, "a@example.com")]
    finally:
        conn.close()
    with errands.Queue(pg_empty_url) as q:
        job = q.get(job_id)
        assert job is not None and job.payload == {"order_id": 1}
    # The doc names exactly these tables as what graduate copies.
    section = (
        (ROOT / "docs" / "postgres.md")
        .read_text()
        .split("### Your application's own tables in the same file", 1)[1]
    )
    first = section.split("\n\n", 2)[1]
    assert [name for name, _ in TABLES] == [
        n for n in first.replace("\n", " ").split("`")[1::2] if n in dict(TABLES)
    ]


def test_an_unmoved_sqlite_connection_is_refused_by_the_postgres_queue(
    tmp_path: Path, pg_empty_url: str
) -> None:
    conn = sqlite3.connect(tmp_path / "app.db")
    try:
        with errands.Queue(pg_empty_url) as q:
            conn.execute("CREATE TABLE shop_order (id INTEGER PRIMARY KEY, email TEXT)")
            with pytest.raises(ConfigurationError, match=r"connection= must be a psycopg\."):
                q.enqueue("send_receipt", {"order_id": 1}, connection=conn)
            assert q.jobs() == []
    finally:
        conn.close()


def test_moved_together_the_order_and_its_job_commit_as_one(pg_empty_url: str) -> None:
    with errands.Queue(pg_empty_url) as q, psycopg.connect(pg_empty_url) as pg:
        pg.execute("CREATE TABLE shop_order (id SERIAL PRIMARY KEY, email TEXT)")
        pg.commit()
        with pg.transaction():
            pg.execute("INSERT INTO shop_order (email) VALUES ('a@example.com')")
            job_id = q.enqueue("send_receipt", {"order_id": 1}, connection=pg)
        with pytest.raises(RuntimeError), pg.transaction():
            pg.execute("INSERT INTO shop_order (email) VALUES ('b@example.com')")
            q.enqueue("send_receipt", {"order_id": 2}, connection=pg)
            raise RuntimeError("payment refused")
        assert pg.execute("SELECT count(*) FROM shop_order").fetchone() == (1,)
        assert [j.id for j in q.jobs()] == [job_id]
