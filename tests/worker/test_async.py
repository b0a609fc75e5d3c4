"""Async producers: ``enqueue_async``, ``enqueue_many_async``, ``task.enqueue_async`` store
exactly what their blocking twins store, without the event loop waiting on the write, and
enqueue inside the application's own transaction (PostgreSQL ``AsyncConnection``; SQLite's
``sqlite3.Connection``). Includes an ``async def`` Starlette endpoint on each backend."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

import errands
from errands.queue import EnqueueItem
from helpers.support import event_names


def run(coro: Awaitable[Any]) -> Any:
    async def main() -> Any:
        return await coro

    return asyncio.run(main())


def test_enqueue_async_stores_what_enqueue_stores(queue: errands.Queue) -> None:
    job_id = run(
        queue.enqueue_async(
            "send", {"to": "a@example.com"}, queue="emails", priority=5, max_attempts=3
        )
    )
    job = queue.get(job_id)
    assert job is not None
    assert (job.type, job.payload, job.queue, job.priority, job.max_attempts, job.status) == (
        "send",
        {"to": "a@example.com"},
        "emails",
        5,
        3,
        "queued",
    )
    assert event_names(queue, job_id) == ["ENQUEUED"]
    assert queue.events(job_id)[0].actor == "api"


def test_enqueue_many_async_returns_ids_in_order(queue: errands.Queue) -> None:
    # 100 jobs: on PostgreSQL this takes the COPY path, awaited like the rest.
    items: list[EnqueueItem] = [("t", {"n": n}) for n in range(100)]
    items.append(("u", {}, {"delay": 60}))
    ids = run(queue.enqueue_many_async(items, actor="batch"))
    assert ids == sorted(ids) and len(set(ids)) == 101
    jobs = {j.id: j for j in queue.jobs(limit=200)}
    assert [jobs[i].payload for i in ids[:100]] == [{"n": n} for n in range(100)]
    assert jobs[ids[-1]].type == "u"
    assert queue.events(ids[0])[0].actor == "batch"


def test_task_enqueue_async_and_with_options(make_queue: Callable[..., errands.Queue]) -> None:
    q = make_queue()

    @q.task(queue="emails")
    def send(to: str) -> None: ...

    async def main() -> tuple[int, int]:
        plain = await send.enqueue_async(to="a@example.com")
        later = await send.with_options(delay=60, unique_key="k").enqueue_async(to="b")
        again = await send.with_options(unique_key="k").enqueue_async(to="c")
        assert again == later
        return plain, later

    plain, later = run(main())
    a, b = q.get(plain), q.get(later)
    assert a is not None and (a.type, a.queue, a.payload) == (
        "send",
        "emails",
        {"to": "a@example.com"},
    )
    assert b is not None and b.run_at is not None and b.created_at is not None
    assert (b.run_at - b.created_at).total_seconds() == pytest.approx(60)


def test_bad_input_is_refused_before_anything_is_written(
    make_queue: Callable[..., errands.Queue],
) -> None:
    q = make_queue()

    @q.task
    def send(to: str) -> None: ...

    async def main() -> None:
        with pytest.raises(errands.PayloadError):
            await q.enqueue_async("send", {"to": {1, 2}})
        with pytest.raises(errands.PayloadError):
            await send.enqueue_async(wrong="x")
        with pytest.raises(errands.PayloadError, match="item 1"):
            await q.enqueue_many_async([("send", {"to": "a"}), ("send", {"to": float("nan")})])
        with pytest.raises(errands.UnknownTaskError):
            await q.enqueue_async("nope", {})

    run(main())
    assert q.jobs() == []


@contextlib.contextmanager
def write_blocked(db_url: str, is_sqlite: bool) -> Iterator[None]:
    """Another transaction holds what an enqueue needs until the block ends."""
    if is_sqlite:
        conn = sqlite3.connect(db_url, isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            conn.execute("ROLLBACK")
            conn.close()
        return
    import psycopg

    with psycopg.connect(db_url) as pg:
        pg.execute("LOCK TABLE jobs IN EXCLUSIVE MODE")
        yield
        pg.rollback()


def test_the_event_loop_keeps_running_while_the_write_waits(
    queue: errands.Queue, db_url: str, is_sqlite: bool
) -> None:
    """The write is stuck behind another transaction's lock; the loop still runs other tasks,
    and the job is stored once the lock is released."""
    released = threading.Event()

    async def main() -> tuple[int, int]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while not released.is_set():
                await asyncio.sleep(0.005)
                ticks += 1

        with write_blocked(db_url, is_sqlite):
            pending = asyncio.create_task(queue.enqueue_async("t", {}))
            tick = asyncio.create_task(ticker())
            while ticks < 20:  # would never get here if enqueue_async blocked the loop
                await asyncio.sleep(0.005)
            assert not pending.done()
            ticked_while_blocked = ticks
        released.set()
        job_id = await pending
        await tick
        return job_id, ticked_while_blocked

    job_id, ticked = asyncio.run(main())
    assert ticked >= 20
    job = queue.get(job_id)
    assert job is not None and job.status == "queued"


# -- in the application's transaction ---------------------------------------------------------


def test_sqlite_enqueue_async_in_the_applications_transaction(sqlite_path: str) -> None:
    with errands.Queue(sqlite_path) as q:
        app = sqlite3.connect(sqlite_path)
        app.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY)")
        app.commit()

        async def order(commit: bool) -> int:
            app.execute("INSERT INTO orders DEFAULT VALUES")
            job_id = await q.enqueue_async("ship", {}, connection=app)
            app.commit() if commit else app.rollback()
            return job_id

        kept = run(order(True))
        dropped = run(order(False))
        app.close()
        assert q.get(kept) is not None and q.get(dropped) is None


def test_postgres_enqueue_async_in_an_async_connection_transaction(pg_url: str) -> None:
    import psycopg

    with errands.Queue(pg_url) as q:

        async def main() -> tuple[int, int]:
            async with await psycopg.AsyncConnection.connect(pg_url) as conn:
                async with conn.transaction():
                    kept = await q.enqueue_async("ship", {"n": 1}, connection=conn)
                with contextlib.suppress(ZeroDivisionError):
                    async with conn.transaction():
                        dropped = await q.enqueue_async("ship", {"n": 2}, connection=conn)
                        ids = await q.enqueue_many_async([("ship", {})] * 70, connection=conn)
                        assert len(ids) == 70
                        raise ZeroDivisionError  # rolls the transaction back
            return kept, dropped

        kept, dropped = run(main())
        assert q.get(kept) is not None
        assert q.get(dropped) is None
        assert len(q.jobs(limit=500)) == 1


def test_postgres_connection_kinds_are_checked(pg_url: str) -> None:
    import psycopg

    with errands.Queue(pg_url) as q:

        async def main() -> None:
            async with await psycopg.AsyncConnection.connect(pg_url, autocommit=True) as conn:
                with pytest.raises(errands.ConfigurationError, match="autocommit"):
                    await q.enqueue_async("t", {}, connection=conn)
                with pytest.raises(errands.ConfigurationError, match="enqueue_async"):
                    q.enqueue("t", {}, connection=conn)
            with psycopg.connect(pg_url) as blocking:
                with pytest.raises(errands.ConfigurationError, match="AsyncConnection"):
                    await q.enqueue_async("t", {}, connection=blocking)

        run(main())
        assert q.jobs() == []


# -- an async web endpoint --------------------------------------------------------------------


def signup_app(q: errands.Queue, db_url: str, is_sqlite: bool) -> Starlette:
    """POST /signup?fail=1 enqueues a welcome email in the request's transaction, then fails
    the request after the enqueue, so the transaction rolls back."""

    async def signup(request: Request) -> JSONResponse:
        fail = request.query_params.get("fail") == "1"
        if is_sqlite:
            # SQLite: enqueue_async on its own (committed when it returns).
            if fail:
                return JSONResponse({"error": "refused"}, status_code=400)
            job_id = await q.enqueue_async("welcome", {"user": "ann"})
            return JSONResponse({"job": job_id})
        import psycopg

        async with await psycopg.AsyncConnection.connect(db_url) as conn:
            try:
                async with conn.transaction():
                    await conn.execute("CREATE TABLE IF NOT EXISTS users (name text)")
                    await conn.execute("INSERT INTO users VALUES ('ann')")
                    job_id = await q.enqueue_async("welcome", {"user": "ann"}, connection=conn)
                    if fail:
                        raise ValueError("refused after enqueueing")
            except ValueError:
                return JSONResponse({"error": "refused", "job": job_id}, status_code=400)
        return JSONResponse({"job": job_id})

    return Starlette(routes=[Route("/signup", signup, methods=["POST"])])


def test_an_async_endpoint_enqueues_in_its_transaction(
    make_queue: Callable[..., errands.Queue], db_url: str, is_sqlite: bool
) -> None:
    queue, app_queue = make_queue(), make_queue()
    app = signup_app(app_queue, db_url, is_sqlite)

    async def requests() -> tuple[httpx.Response, httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://app") as client:
            ok = await client.post("/signup")
            refused = await client.post("/signup?fail=1")
        await app_queue.aclose()  # as an app's lifespan would at shutdown
        return ok, refused

    ok, refused = asyncio.run(requests())
    assert ok.status_code == 200 and refused.status_code == 400
    job = queue.get(ok.json()["job"])
    assert job is not None and (job.type, job.payload) == ("welcome", {"user": "ann"})
    if not is_sqlite:
        assert queue.get(refused.json()["job"]) is None  # rolled back with the request
    assert [j.id for j in queue.jobs()] == [job.id]


def test_eager_runs_jobs_enqueued_by_the_async_producers(
    make_queue: Callable[..., errands.Queue],
) -> None:
    from errands.testing import eager

    q = make_queue()

    @q.task
    def double(n: int) -> int:
        return 2 * n

    async def produce() -> list[int]:
        one = await double.enqueue_async(n=1)
        many = await q.enqueue_many_async([("double", {"n": 2})])
        return [one, *many]

    with eager(q):
        ids = run(produce())
    assert [getattr(q.get(i), "result", None) for i in ids] == [2, 4]
