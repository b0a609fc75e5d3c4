"""Helpers for testing your own tasks with errands.

    from errands.testing import FrozenClock, drain

    def test_welcome_email(tmp_path):
        clock = FrozenClock()
        q = make_queue(tmp_path / "jobs.db", clock=clock)   # your app's Queue factory
        job_id = send_welcome.enqueue(user_id=42)
        drain(q)                                  # runs every due job, retries included
        assert q.get(job_id).status == "succeeded"
        clock.advance(3600)                       # make scheduled jobs due
        drain(q)

Use a real file (``tmp_path``), not ``:memory:``: errands refuses in-memory databases because
workers and producers are separate connections.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

from .core import validate
from .queue import Queue
from .worker.loop import Worker, WorkerSummary

__all__ = ["FrozenClock", "drain", "eager"]


class FrozenClock:
    """A clock for ``Queue(clock=…)`` that moves only when told to. ``start``: unix seconds
    or an aware datetime (a naive one raises ``ConfigurationError``, as ``run_at`` does)."""

    def __init__(self, start: float | datetime | None = None) -> None:
        # The rule run_at follows: an aware datetime or unix seconds; a naive datetime is
        # refused rather than read as this machine's local time.
        self.now = time.time() if start is None else validate.epoch(start, "FrozenClock start")

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float | timedelta) -> float:
        self.now += seconds.total_seconds() if isinstance(seconds, timedelta) else seconds
        return self.now

    def datetime(self) -> datetime:
        return datetime.fromtimestamp(self.now, UTC)


def drain(queue: Queue, *, concurrency: int = 1, queues: list[str] | None = None) -> WorkerSummary:
    """Run every job of the queue's tasks that is due now, until none is due or running.
    Signals are left alone, so this is safe inside a test runner."""
    return Worker(
        queue, concurrency=concurrency, queues=queues, burst=True, handle_signals=False
    ).run()


@contextmanager
def eager(queue: Queue) -> Iterator[None]:
    """Inside the block, each enqueue on ``queue`` (``enqueue``, ``enqueue_many`` and their
    ``_async`` forms) and each ``signal`` (a job parked in ``ctx.wait_for`` resumes) runs due
    jobs at once (in the calling thread — for the async forms, on the
    event loop — through the real worker path: payload checks, retries, events)."""
    original_enqueue, original_many = queue.enqueue, queue.enqueue_many
    original_async, original_many_async = queue.enqueue_async, queue.enqueue_many_async
    original_signal = queue.signal

    def signal(*args: object, **kwargs: object) -> int:
        job_id = original_signal(*args, **kwargs)  # type: ignore[arg-type]
        drain(queue)
        return job_id

    def enqueue(*args: object, **kwargs: object) -> int:
        job_id = original_enqueue(*args, **kwargs)  # type: ignore[arg-type]
        drain(queue)
        return job_id

    def enqueue_many(*args: object, **kwargs: object) -> list[int]:
        ids = original_many(*args, **kwargs)  # type: ignore[arg-type]
        drain(queue)
        return ids

    async def enqueue_async(*args: object, **kwargs: object) -> int:
        job_id = await original_async(*args, **kwargs)  # type: ignore[arg-type]
        drain(queue)
        return job_id

    async def enqueue_many_async(*args: object, **kwargs: object) -> list[int]:
        ids = await original_many_async(*args, **kwargs)  # type: ignore[arg-type]
        drain(queue)
        return ids

    queue.enqueue = enqueue  # type: ignore[method-assign]
    queue.enqueue_many = enqueue_many  # type: ignore[method-assign]
    queue.enqueue_async = enqueue_async  # type: ignore[method-assign]
    queue.enqueue_many_async = enqueue_many_async  # type: ignore[method-assign]
    queue.signal = signal  # type: ignore[method-assign]
    try:
        yield
    finally:
        del queue.enqueue, queue.enqueue_many, queue.enqueue_async, queue.enqueue_many_async
        del queue.signal
