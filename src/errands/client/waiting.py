"""Waiting for a job's outcome: the logic once (a generator of steps), driven by a blocking
and by an asyncio waiter, as ``Queue.wait`` and ``Queue.wait_async``."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Generator

from ..core.records import Job
from ..core.settings import Duration, seconds
from ..core.states import TERMINAL
from ..errors import JobNotFoundError, WaitTimeout
from ..wakeups import Wakeups

# Yields None to be sent the job as read now, or seconds to sleep until a wake-up.
WaitSteps = Generator[float | None, Job | None, Job]


def final_job_steps(job_id: int, timeout: Duration | None, poll_interval: float) -> WaitSteps:
    """Read the job until it is final; between reads, sleep until a wake-up (a fallback
    poll of ``poll_interval`` covers a lost notification) or the ``timeout``."""
    limit = None if timeout is None else seconds(timeout, "timeout", allow_zero=True)
    started = time.monotonic()
    while True:
        job = yield None
        if job is None:
            raise JobNotFoundError(f"no job with id {job_id}; list jobs with `errands jobs`")
        if job.status in TERMINAL:
            return job
        pause = poll_interval
        if limit is not None:
            left = limit - (time.monotonic() - started)
            if left <= 0:
                raise WaitTimeout(
                    f"job {job_id} is still {job.status} after {limit:g}s; wait longer "
                    f"(timeout=…) or look at it with `errands show {job_id}`"
                )
            pause = min(pause, left)
        yield pause


def wait_blocking(steps: WaitSteps, read: Callable[[], Job | None], sub: Wakeups) -> Job:
    try:
        step = next(steps)
        while True:
            if step is None:
                step = steps.send(read())
            else:
                sub.wait(step)
                step = steps.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


async def wait_async(
    steps: WaitSteps, read: Callable[[], Awaitable[Job | None]], sub: Wakeups
) -> Job:
    try:
        step = next(steps)
        while True:
            if step is None:
                step = steps.send(await read())
            else:
                await sub.wait_async(step)
                step = steps.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
