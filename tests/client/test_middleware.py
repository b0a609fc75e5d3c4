"""Middleware (``q.use``): enqueue and execute hooks, their order, what they see, headers stored
with the job, and the guarantee that a hook that raises never changes a job's outcome."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import errands
from errands.worker.loop import Worker
from helpers.support import wait_for


class Recorder(errands.Middleware):
    """Writes what it saw, before and after, into a shared list."""

    def __init__(self, name: str, log: list[Any]) -> None:
        self.name = name
        self.log = log

    def enqueue(self, job: errands.Enqueuing) -> Iterator[None]:
        self.log.append((self.name, "enqueue-before", job.type, job.id))
        job.headers[f"seen-by-{self.name}"] = "yes"
        yield
        self.log.append((self.name, "enqueue-after", job.type, job.id))

    def execute(self, attempt: errands.Execution) -> Iterator[None]:
        self.log.append((self.name, "execute-before", attempt.job_id, attempt.attempt))
        yield
        self.log.append(
            (
                self.name,
                "execute-after",
                attempt.job_id,
                attempt.attempt,
                attempt.outcome,
                attempt.error_code,
            )
        )


def test_hooks_wrap_in_registration_order_and_see_ids_and_outcomes(
    queue: errands.Queue,
) -> None:
    seen: list[Any] = []
    queue.use(Recorder("outer", seen))
    queue.use(Recorder("inner", seen))

    @queue.task
    def ok() -> None:
        seen.append(("handler",))

    job_id = ok.enqueue()
    assert seen == [
        ("outer", "enqueue-before", "ok", None),
        ("inner", "enqueue-before", "ok", None),
        ("inner", "enqueue-after", "ok", job_id),
        ("outer", "enqueue-after", "ok", job_id),
    ]
    seen.clear()
    queue.run_worker(burst=True, handle_signals=False)
    assert seen == [
        ("outer", "execute-before", job_id, 1),
        ("inner", "execute-before", job_id, 1),
        ("handler",),
        ("inner", "execute-after", job_id, 1, "succeeded", None),
        ("outer", "execute-after", job_id, 1, "succeeded", None),
    ]


def test_headers_set_at_enqueue_are_stored_and_handed_to_every_attempt(
    queue: errands.Queue,
) -> None:
    seen: list[Any] = []
    headers: list[dict[str, str]] = []

    class Carry(errands.Middleware):
        def enqueue(self, job: errands.Enqueuing) -> None:  # a plain hook: before only
            job.headers["traceparent"] = f"for-{job.type}"

        def execute(self, attempt: errands.Execution) -> None:
            headers.append(dict(attempt.headers))

    queue.use(Carry())
    queue.use(Recorder("r", seen))

    @queue.task(max_attempts=2, backoff=errands.fixed(0))
    def flaky(ctx: errands.JobContext) -> None:
        if ctx.attempt == 1:
            raise RuntimeError("first time")

    job_id = flaky.enqueue()
    queue.run_worker(burst=True, handle_signals=False)
    job = queue.get(job_id)
    assert job is not None and job.status == "succeeded"
    assert job.headers == {"traceparent": "for-flaky", "seen-by-r": "yes"}
    assert headers == [job.headers, job.headers]  # both attempts
    afters = [e for e in seen if e[1] == "execute-after"]
    assert [(e[3], e[4], e[5]) for e in afters] == [
        (1, "retrying", "INTERNAL:RuntimeError"),
        (2, "succeeded", None),
    ]


def test_a_job_enqueued_without_middleware_has_no_headers_and_workers_no_hooks(
    queue: errands.Queue,
) -> None:
    @queue.task
    def ok() -> None: ...

    job_id = ok.enqueue()
    job = queue.get(job_id)
    assert job is not None and job.headers is None
    assert Worker(queue, handle_signals=False)._hooks is None


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_execute_hooks_see_failures_cancellation_and_the_exception_for_both_handler_kinds(
    queue: errands.Queue, kind: str
) -> None:
    attempts: list[errands.Execution] = []

    class Keep(errands.Middleware):
        def execute(self, attempt: errands.Execution) -> Iterator[None]:
            yield
            attempts.append(attempt)

    queue.use(Keep())
    boom = ValueError("boom")
    if kind == "sync":

        @queue.task(name="bad", max_attempts=1)
        def bad() -> None:
            raise boom

        @queue.task(name="coded", max_attempts=3)
        def coded() -> None:
            raise errands.JobError("SMTP:REJECTED", "no", retry=False)

    else:

        @queue.task(name="bad", max_attempts=1)
        async def abad() -> None:
            raise boom

        @queue.task(name="coded", max_attempts=3)
        async def acoded() -> None:
            raise errands.JobError("SMTP:REJECTED", "no", retry=False)

    bad_id = queue.enqueue("bad")
    coded_id = queue.enqueue("coded")
    queue.run_worker(burst=True, handle_signals=False)
    by_id = {a.job_id: a for a in attempts}
    assert (by_id[bad_id].outcome, by_id[bad_id].error_code) == ("failed", "INTERNAL:ValueError")
    assert by_id[bad_id].exception is boom
    assert (by_id[coded_id].outcome, by_id[coded_id].error_code) == ("failed", "SMTP:REJECTED")
    assert isinstance(by_id[coded_id].exception, errands.JobError)


class Raises(errands.Middleware):
    """A middleware with a bug at the given points."""

    def __init__(self, where: set[str]) -> None:
        self.where = where

    def enqueue(self, job: errands.Enqueuing) -> Iterator[None]:
        if "enqueue-before" in self.where:
            raise RuntimeError("bug in enqueue-before")
        yield
        if "enqueue-after" in self.where:
            raise RuntimeError("bug in enqueue-after")

    def execute(self, attempt: errands.Execution) -> Iterator[None]:
        if "execute-before" in self.where:
            raise RuntimeError("bug in execute-before")
        yield
        if "execute-after" in self.where:
            raise RuntimeError("bug in execute-after")


@pytest.mark.parametrize(
    "where", ["enqueue-before", "enqueue-after", "execute-before", "execute-after"]
)
def test_a_hook_that_raises_leaves_outcomes_untouched_and_is_logged_once(
    queue: errands.Queue, caplog: pytest.LogCaptureFixture, where: str
) -> None:
    seen: list[Any] = []
    queue.use(Raises({where}))
    queue.use(Recorder("after-the-buggy-one", seen))

    @queue.task
    def ok() -> str:
        return "fine"

    @queue.task(max_attempts=1)
    def bad() -> None:
        raise ValueError("handler's own failure")

    with caplog.at_level(logging.ERROR, logger="errands"):
        ok_id = ok.enqueue()
        bad_id = bad.enqueue()
        queue.run_worker(burst=True, handle_signals=False)

    good, failed = queue.get(ok_id), queue.get(bad_id)
    assert good is not None and (good.status, good.result) == ("succeeded", "fine")
    assert failed is not None
    assert (failed.status, failed.error_code) == ("failed", "INTERNAL:ValueError")
    # The other middleware still ran, before and after, for both jobs.
    assert sum(1 for e in seen if e[1] == "execute-after") == 2
    assert sum(1 for e in seen if e[1] == "enqueue-after") == 2
    bugs = [r for r in caplog.records if r.name == "errands" and "raised during" in r.message]
    assert len(bugs) == 2  # once per job
    assert all(r.exc_info is not None for r in bugs)


def test_enqueue_hooks_see_a_failed_write_and_it_still_raises(queue: errands.Queue) -> None:
    seen: list[tuple[int | None, BaseException | None]] = []

    class Watch(errands.Middleware):
        def enqueue(self, job: errands.Enqueuing) -> Iterator[None]:
            yield
            seen.append((job.id, job.error))

    queue.use(Watch())
    # Refused inside the write (the connection is checked there), after the before-parts ran.
    with pytest.raises(errands.ConfigurationError, match="connection=") as raised:
        queue.enqueue("t", {"x": 1}, connection=object())
    assert seen == [(None, raised.value)]
    assert queue.jobs() == []


def test_middleware_runs_for_enqueue_many_and_async_producers(queue: errands.Queue) -> None:
    seen: list[Any] = []
    queue.use(Recorder("r", seen))
    ids = queue.enqueue_many([("a", {}), ("b", {})])

    async def produce() -> list[int]:
        one = await queue.enqueue_async("c", {})
        many = await queue.enqueue_many_async([("d", {})])
        return [one, *many]

    ids += asyncio.run(produce())
    after = [(e[2], e[3]) for e in seen if e[1] == "enqueue-after"]
    assert sorted(after) == sorted(zip("abcd", ids, strict=True))
    for job_id in ids:
        job = queue.get(job_id)
        assert job is not None and job.headers == {"seen-by-r": "yes"}


def test_use_refuses_an_object_without_hooks(queue: errands.Queue) -> None:
    with pytest.raises(errands.ConfigurationError, match="neither an enqueue"):
        queue.use(object())


def test_use_refuses_async_hooks(queue: errands.Queue) -> None:
    class AsyncHook(errands.Middleware):
        async def execute(self, attempt: errands.Execution) -> None: ...

    with pytest.raises(errands.ConfigurationError, match="is async"):
        queue.use(AsyncHook())
    assert queue.middleware == ()


def test_bad_headers_from_a_hook_are_dropped_and_logged(
    queue: errands.Queue, caplog: pytest.LogCaptureFixture
) -> None:
    class BadHeaders(errands.Middleware):
        def enqueue(self, job: errands.Enqueuing) -> None:
            job.headers["n"] = 1  # type: ignore[assignment]

    queue.use(BadHeaders())
    with caplog.at_level(logging.ERROR, logger="errands"):
        job_id = queue.enqueue("t", {})
    job = queue.get(job_id)
    assert job is not None and job.headers is None
    assert [r for r in caplog.records if "bad job headers" in r.message]


def test_execute_hooks_see_a_cancelled_attempt_and_a_timed_out_one(
    queue: errands.Queue,
) -> None:
    ended: list[errands.Execution] = []

    class Keep(errands.Middleware):
        def execute(self, attempt: errands.Execution) -> Iterator[None]:
            yield
            ended.append(attempt)

    queue.use(Keep())

    @queue.task
    async def long_wait() -> None:
        await asyncio.sleep(60)

    @queue.task(max_attempts=1, timeout=0.2)
    def overrun() -> None:
        time.sleep(1.0)  # a sync handler cannot be interrupted: it is abandoned at 0.2 s

    cancel_id = long_wait.enqueue()
    overrun_id = overrun.enqueue()
    worker = Worker(queue, handle_signals=False)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: getattr(queue.get(cancel_id), "status", None) == "running")
        queue.cancel(cancel_id)
        assert queue.wait(cancel_id, timeout=30).status == "cancelled"
        assert queue.wait(overrun_id, timeout=30).error_code == "TIMEOUT:JOB"
        wait_for(lambda: len(ended) == 2, what="the abandoned thread's hooks")
    finally:
        worker.stop()
        thread.join(30)
    by_id = {a.job_id: a for a in ended}
    assert (by_id[cancel_id].outcome, by_id[cancel_id].error_code) == (
        "cancelled",
        "CANCELLED:BY_USER",
    )
    assert (by_id[overrun_id].outcome, by_id[overrun_id].error_code) == ("failed", "TIMEOUT:JOB")
