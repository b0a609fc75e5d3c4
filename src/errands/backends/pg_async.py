"""The PostgreSQL backend's asyncio side (``enqueue_async``): the steps driver for an asyncio
connection and the per-loop pools' lifecycle. The verbs themselves are in postgres.py."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Any, TypeVar

import psycopg
from psycopg.rows import tuple_row
from psycopg_pool import AsyncConnectionPool

from .host import ALL, COPY, MANY, ONE, Steps
from .pg_connection import Conn

T = TypeVar("T")


async def drive_async(raw: psycopg.AsyncConnection[Any], steps: Steps[T]) -> T:
    """``host.drive`` for an asyncio connection: the same steps, awaited."""
    result: Any = None
    try:
        while True:
            step = steps.send(result)
            cur = raw.cursor(row_factory=tuple_row)
            result = None
            if step.mode == COPY:
                async with cur.copy(step.sql) as copy:
                    for row in step.params:
                        await copy.write_row(row)
            elif step.mode == MANY:
                await cur.executemany(step.sql, step.params)
            else:
                prepare = True if step.sql in Conn.prepared else None
                await cur.execute(step.sql, step.params or None, prepare=prepare)
                if step.mode == ONE:
                    result = await cur.fetchone()
                elif step.mode == ALL:
                    result = await cur.fetchall()
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


class AsyncPool:
    """An async pool and its keeper, a task on the pool's loop that closes the pool when the
    task is cancelled — by ``aclose()``, or by ``asyncio.run()`` cancelling every task as the
    loop ends. Without it a loop ending with the pool open can hang: psycopg_pool's workers
    retry a connection attempt that the shutdown cancelled instead of ending."""

    def __init__(self, pool: AsyncConnectionPool[Any], loop: asyncio.AbstractEventLoop) -> None:
        self.pool = pool
        # Every caller on this loop awaits the same opening.
        self.opened = asyncio.ensure_future(pool.open())
        self.keeper = loop.create_task(self._keep(), name="errands-async-pool")

    async def _keep(self) -> None:
        try:
            await asyncio.Event().wait()  # until cancelled
        finally:
            await self.pool.close()


def close_async_pool(loop: asyncio.AbstractEventLoop, pool: AsyncConnectionPool[Any]) -> None:
    """Close an async pool from blocking code. Its own loop, if still running in another
    thread, closes it; otherwise a short-lived loop on a helper thread does (this may be
    called from inside a running loop, where we cannot block on one of our own)."""
    if loop.is_running() and not in_loop(loop):
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(pool.close(), loop).result(timeout=10)
        return

    def run() -> None:
        with contextlib.suppress(Exception):
            asyncio.run(pool.close())

    closer = threading.Thread(target=run, name="errands-close")
    closer.start()
    closer.join(timeout=10)


def in_loop(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False
