"""Durable steps (docs/durable-steps.md), on both backends with a real worker: a recorded step
is not run again, a stale attempt records nothing, a changed handler fails STEP:MISMATCH, and
a step with connection= commits its writes with its record — or neither."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest

import errands
from errands.context import JobContext


@pytest.fixture
def app_conn(db_url: str, is_sqlite: bool) -> Iterator[Any]:
    """The application's own connection to the queue's database, with a table of its own."""
    if is_sqlite:
        conn: Any = sqlite3.connect(db_url, timeout=30, check_same_thread=False)
    else:
        import psycopg

        conn = psycopg.connect(db_url, autocommit=True)
    conn.execute("CREATE TABLE effects (job_id INTEGER, step TEXT)")
    if is_sqlite:
        conn.commit()
    try:
        yield conn
    finally:
        conn.close()


def effects(conn: Any) -> list[tuple[int, str]]:
    rows = conn.execute("SELECT job_id, step FROM effects ORDER BY job_id, step").fetchall()
    return [tuple(r) for r in rows]


def insert(conn: Any, is_sqlite: bool, job_id: int, step: str) -> None:
    mark = "?" if is_sqlite else "%s"
    conn.execute(f"INSERT INTO effects (job_id, step) VALUES ({mark}, {mark})", (job_id, step))


def noting(log: list[str], tag: str, value: Any) -> Any:
    """A step function's body: note that it ran, return ``value``."""
    log.append(tag)
    return value


def kinds(queue: errands.Queue, job_id: int) -> list[tuple[str, str, int]]:
    return [(s.kind, s.name, s.attempt) for s in queue.steps(job_id)]


def test_a_recorded_step_returns_its_result_without_running_again(queue: errands.Queue) -> None:
    calls: list[str] = []

    @queue.task(backoff=errands.fixed(0))
    def flow(ctx: JobContext) -> list[Any]:
        a = ctx.step("fetch", lambda: noting(calls, "fetch", {"n": 1}))
        b = ctx.step("fetch", lambda: noting(calls, "fetch#2", [a["n"], 2]))
        if ctx.attempt == 1:
            raise RuntimeError("fails after its steps")
        return [a, b]

    job_id = flow.enqueue()
    queue.run_worker(burst=True)
    job = queue.get(job_id)
    assert job is not None and job.status == "succeeded"
    assert job.result == [{"n": 1}, [1, 2]]
    assert calls == ["fetch", "fetch#2"]  # the retry replayed both
    assert kinds(queue, job_id) == [("step", "fetch", 1), ("step", "fetch#2", 1)]
    assert [s.result for s in queue.steps(job_id)] == [{"n": 1}, [1, 2]]


def test_a_step_that_raises_is_not_recorded(queue: errands.Queue) -> None:
    calls: list[int] = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise ValueError("upstream down")
        return "ok"

    @queue.task(backoff=errands.fixed(0))
    def flow(ctx: JobContext) -> str:
        return str(ctx.step("call", flaky))

    job_id = flow.enqueue()
    queue.run_worker(burst=True)
    assert queue.get(job_id).status == "succeeded"  # type: ignore[union-attr]
    assert len(calls) == 2
    assert kinds(queue, job_id) == [("step", "call", 2)]


def test_a_stale_attempt_records_nothing_and_cannot_swallow_it(queue: errands.Queue) -> None:
    """The attempt's lease is recovered while it runs: its next step's record is refused by
    the fence, the call raises past ``except Exception``, ``finally`` runs, and the next
    attempt replays what was recorded and runs the rest."""
    ran: list[str] = []
    seen: list[str] = []

    @queue.task(backoff=errands.fixed(0))
    def flow(ctx: JobContext) -> str:
        try:
            ctx.step("a", lambda: noting(ran, f"a{ctx.attempt}", "A"))
            if ctx.attempt == 1:  # lose the lease: the rescuer gives the job back
                assert queue.backend.rescue(queue.clock() + 3600).recovered == [ctx.job_id]
            try:
                ctx.step("b", lambda: noting(ran, f"b{ctx.attempt}", "B"))
            except Exception:  # the point: it cannot catch the stale attempt
                seen.append("swallowed")
            return "done"
        finally:
            seen.append(f"finally{ctx.attempt}")

    job_id = flow.enqueue()
    queue.run_worker(burst=True)
    assert queue.steps(job_id)[-1].name == "a"  # b1's record was refused
    queue.run_now(job_id)  # the rescue's "now" was an hour ahead
    queue.run_worker(burst=True)
    job = queue.get(job_id)
    assert job is not None and job.status == "succeeded"
    assert ran == ["a1", "b1", "b2"]  # b1 ran (no connection=) but was not recorded
    assert seen == ["finally1", "finally2"]
    assert kinds(queue, job_id) == [("step", "a", 1), ("step", "b", 2)]


def test_a_changed_handler_fails_step_mismatch_and_reset_starts_over(
    queue: errands.Queue,
) -> None:
    version = {"n": 1}
    ran: list[str] = []

    @queue.task(backoff=errands.fixed(0))
    def flow(ctx: JobContext) -> str:
        ctx.step("first" if version["n"] == 1 else "renamed", lambda: noting(ran, "x", 1))
        try:
            if version["n"] == 1:
                raise errands.JobError("APP:STOP", "stop here", retry=False)
        except Exception:
            raise
        return "ok"

    job_id = flow.enqueue()
    queue.run_worker(burst=True)
    assert queue.get(job_id).status == "failed"  # type: ignore[union-attr]
    version["n"] = 2
    queue.retry(job_id)
    queue.run_worker(burst=True)
    job = queue.get(job_id)
    assert job is not None and (job.status, job.error_code) == ("failed", "STEP:MISMATCH")
    assert "'renamed'" in (job.error_detail or "") and "'first'" in (job.error_detail or "")
    assert job.attempts == 2  # not retried, though attempts were left
    queue.retry(job_id, reset_steps=True)
    queue.run_worker(burst=True)
    assert queue.get(job_id).status == "succeeded"  # type: ignore[union-attr]
    assert kinds(queue, job_id) == [("step", "renamed", 3)]
    assert ran == ["x", "x"]


def test_step_with_connection_commits_its_writes_with_its_record(
    queue: errands.Queue, app_conn: Any, is_sqlite: bool
) -> None:
    """Exactly once: the step's row and its record commit together; a step that raises
    leaves neither, and the retry's step writes its row once."""
    tries: list[int] = []

    @queue.task(backoff=errands.fixed(0))
    def flow(ctx: JobContext) -> int:
        def charge() -> int:
            insert(app_conn, is_sqlite, ctx.job_id, "charge")
            tries.append(ctx.attempt)
            if ctx.attempt == 1:
                raise RuntimeError("fails after its write")
            return 42

        value = ctx.step("charge", charge, connection=app_conn)
        if ctx.attempt == 2:
            raise RuntimeError("fails after the step")  # the step stays recorded
        return int(value)

    job_id = flow.enqueue()
    queue.run_worker(burst=True)
    job = queue.get(job_id)
    assert job is not None and (job.status, job.result) == ("succeeded", 42)
    assert tries == [1, 2]  # attempt 1 rolled back; attempt 3 replayed attempt 2's record
    assert effects(app_conn) == [(job_id, "charge")]
    assert kinds(queue, job_id) == [("step", "charge", 2)]


def test_a_stale_attempt_with_connection_rolls_back_its_writes(
    queue: errands.Queue, app_conn: Any, is_sqlite: bool
) -> None:
    @queue.task(backoff=errands.fixed(0))
    def flow(ctx: JobContext) -> None:
        if ctx.attempt == 1:
            queue.backend.rescue(queue.clock() + 3600)
        ctx.step(
            "w",
            lambda: insert(app_conn, is_sqlite, ctx.job_id, f"w{ctx.attempt}"),
            connection=app_conn,
        )

    job_id = flow.enqueue()
    queue.run_worker(burst=True)
    assert effects(app_conn) == [] and queue.steps(job_id) == []
    queue.run_now(job_id)  # the rescue's "now" was an hour ahead
    queue.run_worker(burst=True)
    assert queue.get(job_id).status == "succeeded"  # type: ignore[union-attr]
    assert effects(app_conn) == [(job_id, "w2")]


def test_step_with_connection_refuses_an_open_transaction(
    queue: errands.Queue, app_conn: Any, is_sqlite: bool
) -> None:
    @queue.task(max_attempts=1)
    def flow(ctx: JobContext) -> None:
        if is_sqlite:
            app_conn.execute("BEGIN")
            insert(app_conn, is_sqlite, ctx.job_id, "mine")
            try:
                ctx.step("w", lambda: None, connection=app_conn)
            finally:
                app_conn.rollback()
        else:
            with app_conn.transaction():
                ctx.step("w", lambda: None, connection=app_conn)

    job_id = flow.enqueue()
    queue.run_worker(burst=True)
    job = queue.get(job_id)
    assert job is not None and job.status == "failed"
    assert "inside a transaction already" in (job.error_detail or "")
    assert queue.steps(job_id) == []


def test_step_names_and_results_are_checked(queue: errands.Queue) -> None:
    @queue.task(max_attempts=1)
    def bad_name(ctx: JobContext) -> None:
        ctx.step("a\x00b", lambda: 1)

    @queue.task(max_attempts=1)
    def bad_result(ctx: JobContext) -> None:
        ctx.step("r", lambda: {1, 2})

    n = bad_name.enqueue()
    r = bad_result.enqueue()
    queue.run_worker(burst=True)
    assert "NUL" in (queue.get(n).error_detail or "")  # type: ignore[union-attr]
    job = queue.get(r)
    assert job is not None and job.error_code == "INVALID_OUTPUT:STEP"
    assert queue.steps(n) == [] and queue.steps(r) == []


def test_async_handlers_use_step_async(queue: errands.Queue) -> None:
    calls: list[int] = []

    async def fetch(x: int) -> int:
        calls.append(x)
        return x * 2

    @queue.task(backoff=errands.fixed(0))
    async def flow(ctx: JobContext) -> int:
        v = await ctx.step_async("fetch", fetch, 21)
        if ctx.attempt == 1:
            raise RuntimeError("again")
        return int(v)

    @queue.task(max_attempts=1)
    async def wrong(ctx: JobContext) -> None:
        ctx.step("sync", lambda: 1)

    job_id, w = flow.enqueue(), wrong.enqueue()
    queue.run_worker(burst=True)
    assert queue.get(job_id).result == 42  # type: ignore[union-attr]
    assert calls == [21]
    assert "step_async" in (queue.get(w).error_detail or "")  # type: ignore[union-attr]


def test_step_key_is_stable_across_runs(queue: errands.Queue) -> None:
    keys: list[str] = []

    @queue.task(backoff=errands.fixed(0))
    def flow(ctx: JobContext) -> None:
        def call() -> None:
            keys.append(ctx.step_key)
            if len(keys) == 1:
                raise RuntimeError("retry me")

        ctx.step("pay", call)

    job_id = flow.enqueue()
    queue.run_worker(burst=True)
    assert len(keys) == 2 and keys[0] == keys[1] and str(job_id) in keys[0]


def test_prune_removes_steps_and_signals_with_their_job(
    queue: errands.Queue, db_url: str, is_sqlite: bool
) -> None:
    @queue.task()
    def flow(ctx: JobContext) -> Any:
        ctx.step("a", lambda: 1)
        return ctx.wait_for("go")

    pruned, deleted = flow.enqueue(), flow.enqueue()  # succeeded, cancelled
    queue.run_worker(burst=True)
    queue.signal(pruned, "go", 1)
    queue.run_worker(burst=True)
    queue.cancel(deleted)  # a waiting job ends at once; its steps stay until it goes
    assert len(queue.steps(pruned)) == len(queue.steps(deleted)) == 2
    report = queue.prune(now=queue.clock() + 400 * 86400)
    assert report.total == 2
    assert queue.steps(pruned) == [] and queue.steps(deleted) == []
    conn: Any = sqlite3.connect(db_url) if is_sqlite else None
    if conn is None:
        import psycopg

        conn = psycopg.connect(db_url)
    try:
        for table in ("job_steps", "job_signals"):
            assert conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0] == 0
    finally:
        conn.close()


def test_concurrent_steps_each_get_their_own_record(queue: errands.Queue) -> None:
    """Many handler threads recording at once (on SQLite they share commits): every step is
    recorded once, with its own job's result."""

    @queue.task()
    def flow(ctx: JobContext, n: int) -> list[int]:
        return [ctx.step(f"s{i}", lambda i=i: n * 10 + i) for i in range(5)]

    ids = [flow.enqueue(n=n) for n in range(24)]
    queue.run_worker(burst=True, concurrency=8)
    for n, job_id in enumerate(ids):
        job = queue.get(job_id)
        assert job is not None and job.result == [n * 10 + i for i in range(5)]
        assert [(s.name, s.result) for s in queue.steps(job_id)] == [
            (f"s{i}", n * 10 + i) for i in range(5)
        ]
