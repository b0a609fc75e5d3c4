"""An application that already has a table named like one of errands' (docs/operations.md,
docs/postgres.md): on PostgreSQL errands lives beside it in a schema of its own; its own
connections find its tables there, and a ``connection=`` enqueue on the application's
connection (other ``search_path``) fails loudly without touching the application's table."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

import errands
from errands.errors import DatabaseError, SchemaConflictError


@pytest.fixture
def app_db(pg_empty_url: str) -> Iterator[str]:
    """An application's database with its own `jobs` table and a schema for errands."""
    with psycopg.connect(pg_empty_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE jobs (id SERIAL PRIMARY KEY, title TEXT NOT NULL)")
        conn.execute("INSERT INTO jobs (title) VALUES ('the app''s own row')")
        conn.execute("CREATE SCHEMA queue")
    yield pg_empty_url


def app_rows(url: str) -> list[tuple[int, str]]:
    with psycopg.connect(url) as conn:
        return [(int(r[0]), str(r[1])) for r in conn.execute("SELECT id, title FROM public.jobs")]


def in_schema(url: str, schema: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}options=-csearch_path%3D{schema}"


def test_errands_is_refused_beside_the_apps_jobs_table_and_hosted_in_a_schema(
    app_db: str,
) -> None:
    with pytest.raises(SchemaConflictError, match="jobs"):
        errands.Queue(app_db)
    with errands.Queue(in_schema(app_db, "queue")) as q:

        @q.task
        def t(n: int) -> int:
            return n + 1

        job_id = t.enqueue(n=1)
        q.run_worker(burst=True, handle_signals=False)
        job = q.get(job_id)
        assert job is not None and (job.status, job.result) == ("succeeded", 2)
    with psycopg.connect(app_db) as conn:
        (n,) = conn.execute("SELECT count(*) FROM queue.jobs").fetchone() or (0,)
    assert n == 1
    assert app_rows(app_db) == [(1, "the app's own row")]


def test_connection_enqueue_needs_the_queue_schema_on_the_search_path(app_db: str) -> None:
    with errands.Queue(in_schema(app_db, "queue")) as q:
        with psycopg.connect(app_db) as app:  # search_path: the app's own tables first
            with pytest.raises(DatabaseError):
                with app.transaction():
                    q.enqueue("t", {}, connection=app)
            assert app_rows(app_db) == [(1, "the app's own row")]
            assert q.jobs() == []
        with psycopg.connect(in_schema(app_db, "queue,public")) as app:
            with app.transaction():
                app.execute("INSERT INTO public.jobs (title) VALUES ('an order')")
                job_id = q.enqueue("t", {}, connection=app)
        assert [j.id for j in q.jobs()] == [job_id]
    assert [t for _, t in app_rows(app_db)] == ["the app's own row", "an order"]
