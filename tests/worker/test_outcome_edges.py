"""Hostile handler outputs (issue #8 §1, §3): a result or an error nobody can store, a batch
the database refuses, handlers raising BaseException or lying in ``__str__``, an async
handler that never awaits. Each culprit runs beside healthy jobs; the culprit's outcome is
checked, every neighbour's outcome is untouched, every row stays readable (API and CLI), and
the burst worker returns."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import errands
from errands.worker.loop import Worker
from helpers.ops import assert_figures_equal_a_recount

MakeQueue = Callable[..., errands.Queue]
HEALTHY = 3
TIMEOUT = 120  # a bound for a hang, never a performance assertion


def _run_burst(q: errands.Queue, concurrency: int) -> errands.WorkerSummary:
    """A burst worker in a thread: a worker that never returns fails the test (after a
    generous bound) instead of hanging it."""
    worker = Worker(q, concurrency=concurrency, burst=True, handle_signals=False)
    result: list[errands.WorkerSummary] = []
    thread = threading.Thread(target=lambda: result.append(worker.run()), daemon=True)
    thread.start()
    thread.join(TIMEOUT)
    if thread.is_alive():
        worker.stop()
        thread.join(30)
        pytest.fail("the burst worker did not return")
    return result[0]


def _cli(db_url: str, cwd: Path, *args: str) -> str:
    r = subprocess.run(
        [sys.executable, "-W", "error", "-m", "errands", *args, "--db", db_url],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert r.returncode == 0, (args, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    return r.stdout


def _assert_all_readable(
    q: errands.Queue, db_url: str, tmp_path: Path, *show: int
) -> list[errands.Job]:
    """Every row through every reader: q.get / q.jobs / attempts / events / tracebacks and
    `errands jobs --json` / `errands show`."""
    jobs = q.jobs(limit=1000)
    for job in jobs:
        assert q.get(job.id) == job
        for attempt in q.attempts(job.id):
            if attempt.traceback_ref:
                assert q.traceback(attempt)
        assert q.events(job.id)
    listed = json.loads(_cli(db_url, tmp_path, "jobs", "--json", "--limit", "1000"))
    assert sorted(j["id"] for j in listed) == sorted(j.id for j in jobs)
    for job_id in show:
        assert f"Job {job_id}" in _cli(db_url, tmp_path, "show", str(job_id))
    return jobs


def _healthy_and_culprit(
    q: errands.Queue, culprit: Callable[[], Any], *, is_async: bool = False
) -> tuple[list[int], int]:
    """Healthy jobs and one culprit that finish together (a barrier), so their outcomes
    meet in the worker's outcome batch."""
    barrier = threading.Barrier(HEALTHY + 1, timeout=30)

    @q.task(name="healthy", max_attempts=3)
    def healthy(n: int) -> dict[str, int]:
        barrier.wait()
        return {"n": n}

    @q.task(name="culprit", max_attempts=1)
    def bad() -> Any:
        barrier.wait()
        return culprit()

    healthy_ids = [healthy.enqueue(n=n) for n in range(HEALTHY)]
    return healthy_ids, bad.enqueue()


def _assert_neighbours_untouched(q: errands.Queue, ids: list[int]) -> None:
    for n, job_id in enumerate(ids):
        job = q.get(job_id)
        assert job is not None
        assert (job.status, job.attempts, job.result, job.error_code) == (
            "succeeded",
            1,
            {"n": n},
            None,
        )
        assert [a.status for a in q.attempts(job_id)] == ["succeeded"]
        assert [e.event for e in q.events(job_id)].count("SUCCEEDED") == 1


def _raise(exc: BaseException) -> Callable[[], Any]:
    def culprit() -> Any:
        raise exc

    return culprit


# The examples, each on both backends (each was unstorable on at least one).
RESULTS = {
    "nul-in-result": ({"s": "a\x00b"}, "NUL"),
    "lone-low-surrogate-result": ("\udc80", "surrogate"),
    "lone-high-surrogate-in-dict": ({"s": "\ud800"}, "surrogate"),
    "surrogate-key": ({"k\udc80": 1}, "surrogate"),
}
ERRORS = {
    "nul-in-message": (ValueError("bad\x00msg"), "ValueError: bad\ufffdmsg"),
    "surrogate-in-message": (ValueError("bad \ud800 msg"), "ValueError: bad \ufffd msg"),
}


@pytest.mark.parametrize("case", sorted(RESULTS))
def test_an_unstorable_result_fails_its_job_alone(
    make_queue: MakeQueue, db_url: str, tmp_path: Path, case: str
) -> None:
    value, word = RESULTS[case]
    q = make_queue()
    ids, culprit = _healthy_and_culprit(q, lambda: value)
    summary = _run_burst(q, HEALTHY + 1)

    job = q.get(culprit)
    assert job is not None
    assert (job.status, job.error_code, job.attempts) == ("failed", "INVALID_OUTPUT:RESULT", 1)
    assert job.error_detail is not None and word in job.error_detail
    assert job.result is None
    _assert_neighbours_untouched(q, ids)
    assert (summary.succeeded, summary.failed, summary.refused) == (HEALTHY, 1, 0)
    _assert_all_readable(q, db_url, tmp_path, culprit, ids[0])


@pytest.mark.parametrize("case", sorted(ERRORS))
def test_an_unstorable_error_message_is_sanitized_and_hurts_no_neighbour(
    make_queue: MakeQueue, db_url: str, tmp_path: Path, case: str
) -> None:
    exc, detail = ERRORS[case]
    q = make_queue()
    ids, culprit = _healthy_and_culprit(q, _raise(exc))
    _run_burst(q, HEALTHY + 1)

    job = q.get(culprit)
    assert job is not None
    assert (job.status, job.error_code, job.error_detail) == (
        "failed",
        "INTERNAL:ValueError",
        detail,
    )
    (attempt,) = q.attempts(culprit)
    assert attempt.error_detail == detail
    tb = q.traceback(attempt)
    assert tb is not None and detail in tb
    _assert_neighbours_untouched(q, ids)
    _assert_all_readable(q, db_url, tmp_path, culprit, ids[0])


def test_error_details_are_cut_to_500_characters_and_huge_tracebacks_stay_storable(
    queue: errands.Queue,
) -> None:
    @queue.task(max_attempts=1)
    def shouts() -> None:
        raise ValueError("x\x00" * 200_000)

    @queue.task(max_attempts=1)
    def own_code() -> None:
        raise errands.JobError("SMTP:REJECTED", "y\udc80" * 1000, retry=False)

    a, b = shouts.enqueue(), own_code.enqueue()
    _run_burst(queue, 2)
    for job_id, code in ((a, "INTERNAL:ValueError"), (b, "SMTP:REJECTED")):
        job = queue.get(job_id)
        assert job is not None and (job.status, job.error_code) == ("failed", code)
        assert job.error_detail is not None and len(job.error_detail) <= 500
        assert "\x00" not in job.error_detail and "\ufffd" in job.error_detail
    (attempt,) = queue.attempts(a)
    tb = queue.traceback(attempt)
    assert tb is not None and "characters cut" in tb and tb.rstrip().endswith("\ufffd")


def test_a_result_over_max_result_bytes_fails_its_job_alone(make_queue: MakeQueue) -> None:
    q = make_queue(max_result_bytes=1000)

    @q.task(max_attempts=3)
    def big(size: int) -> str:
        return "r" * size

    fits, too_big = big.enqueue(size=900), big.enqueue(size=5000)
    _run_burst(q, 2)
    ok, bad = q.get(fits), q.get(too_big)
    assert ok is not None and (ok.status, ok.result) == ("succeeded", "r" * 900)
    assert bad is not None
    assert (bad.status, bad.error_code, bad.attempts) == ("failed", "INVALID_OUTPUT:RESULT", 1)
    assert bad.error_detail is not None and "max_result_bytes" in bad.error_detail


@pytest.mark.parametrize("bad", [0, -1])
def test_max_result_bytes_is_validated(db_url: str, bad: int) -> None:
    with pytest.raises(errands.ConfigurationError, match="max_result_bytes must be between 1 and"):
        errands.Queue(db_url, max_result_bytes=bad)


# -- a batch the database refuses -----------------------------------------------------------

_PG_TRIGGER = """
CREATE FUNCTION refuse_poisoned() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'refused by a test trigger'; END $$;
CREATE TRIGGER refuse_poisoned BEFORE UPDATE ON jobs FOR EACH ROW
WHEN (NEW.status = 'succeeded' AND NEW.type = 'culprit') EXECUTE FUNCTION refuse_poisoned();
"""
_SQLITE_TRIGGER = """
CREATE TRIGGER refuse_poisoned BEFORE UPDATE OF status ON jobs
WHEN NEW.status = 'succeeded' AND NEW.type = 'culprit'
BEGIN SELECT RAISE(ABORT, 'refused by a test trigger'); END
"""


def _refuse_culprit_successes(db_url: str, is_sqlite: bool) -> None:
    """A real database that refuses one job's success: the batch holding it fails."""
    if is_sqlite:
        import sqlite3

        conn = sqlite3.connect(db_url)
        with conn:
            conn.execute(_SQLITE_TRIGGER)
        conn.close()
    else:
        import psycopg

        with psycopg.connect(db_url, autocommit=True) as pg:
            pg.execute(_PG_TRIGGER)


def test_a_batch_the_database_refuses_is_written_one_by_one(
    make_queue: MakeQueue, db_url: str, is_sqlite: bool, tmp_path: Path
) -> None:
    q = make_queue()
    ids, culprit = _healthy_and_culprit(q, lambda: {"fine": True})
    _refuse_culprit_successes(db_url, is_sqlite)
    summary = _run_burst(q, HEALTHY + 1)

    job = q.get(culprit)
    assert job is not None
    # Recorded once as a final failure that says why, not retried forever.
    assert (job.status, job.error_code, job.attempts) == ("failed", "INVALID_OUTPUT:RESULT", 1)
    assert job.error_detail is not None
    assert "could not be stored" in job.error_detail and "refused by a test trigger" in (
        job.error_detail
    )
    _assert_neighbours_untouched(q, ids)
    assert (summary.succeeded, summary.failed) == (HEALTHY, 1)
    _assert_all_readable(q, db_url, tmp_path, culprit, ids[0])
    # The refused batch counted nothing (rolled back with its rows); each job, written again
    # alone, is counted once.
    assert_figures_equal_a_recount(db_url)


# -- handlers raising BaseException or lying about themselves --------------------------------


class Custom(BaseException):
    pass


class Liar(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no")


BASE = {
    "SystemExit": (SystemExit(3), "HANDLER:BASE_EXCEPTION", "SystemExit: 3"),
    "KeyboardInterrupt": (KeyboardInterrupt(), "HANDLER:BASE_EXCEPTION", "KeyboardInterrupt"),
    "custom": (Custom("mine"), "HANDLER:BASE_EXCEPTION", "Custom: mine"),
    "lying-str": (Liar(), "INTERNAL:Liar", "Liar: <str() of the exception failed: RuntimeError>"),
}


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("case", sorted(BASE))
def test_a_handler_raising_base_exceptions_fails_the_attempt_and_keeps_its_slot(
    make_queue: MakeQueue, case: str, is_async: bool
) -> None:
    exc, code, detail = BASE[case]
    q = make_queue()
    if is_async:

        @q.task(name="culprit", max_attempts=2, backoff=errands.fixed(0))
        async def culprit_async() -> None:
            await asyncio.sleep(0)
            raise exc

        @q.task(name="after")
        async def after_async(n: int) -> int:
            return n

    else:

        @q.task(name="culprit", max_attempts=2, backoff=errands.fixed(0))
        def culprit_sync() -> None:
            raise exc

        @q.task(name="after")
        def after_sync(n: int) -> int:
            return n

    bad = q.enqueue("culprit")
    later = [q.enqueue("after", {"n": n}) for n in range(3)]
    # One runner: if the culprit took it down, the jobs after it would never run.
    summary = _run_burst(q, 1)

    job = q.get(bad)
    assert job is not None
    assert (job.status, job.error_code, job.error_detail, job.attempts) == (
        "failed",
        code,
        detail,
        2,  # retried by the task's rules like any failure
    )
    assert [a.status for a in q.attempts(bad)] == ["failed", "failed"]
    for n, job_id in enumerate(later):
        done = q.get(job_id)
        assert done is not None and (done.status, done.result) == ("succeeded", n)
    assert (summary.succeeded, summary.failed, summary.retried) == (3, 1, 1)


def test_an_async_handler_that_never_awaits_is_failed_and_its_loop_replaced(
    make_queue: MakeQueue,
) -> None:
    q = make_queue()
    release = threading.Event()

    @q.task(timeout=0.3, max_attempts=1)
    async def hog() -> None:
        release.wait(30)  # blocks the event loop: asyncio.timeout cannot fire

    @q.task
    async def polite(n: int) -> int:
        await asyncio.sleep(0)
        return n

    hog_id = hog.enqueue()
    ids = [polite.enqueue(n=n) for n in range(5)]

    def unblock_when_failed() -> None:
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            job = q.get(hog_id)
            if job is not None and job.status == "failed":
                break
            time.sleep(0.05)
        release.set()

    # The hog is released only once its failure is recorded: the worker must have detected
    # it on its own, with the loop still blocked.
    watcher = threading.Thread(target=unblock_when_failed, daemon=True)
    watcher.start()
    summary = _run_burst(q, 1)
    release.set()
    watcher.join(10)

    job = q.get(hog_id)
    assert job is not None and (job.status, job.error_code) == ("failed", "TIMEOUT:JOB")
    for n, job_id in enumerate(ids):
        done = q.get(job_id)
        assert done is not None and (done.status, done.result) == ("succeeded", n)
    assert (summary.succeeded, summary.failed) == (5, 1)


def test_payload_rule_is_the_same_for_results(queue: errands.Queue) -> None:
    @queue.task(max_attempts=1)
    def deep() -> Any:
        value: Any = 1
        for _ in range(200):
            value = [value]
        return value

    @queue.task(max_attempts=1)
    def huge() -> int:
        return 10**5000

    a, b = deep.enqueue(), huge.enqueue()
    _run_burst(queue, 2)
    for job_id, word in ((a, "nested deeper"), (b, "64-bit")):
        job = queue.get(job_id)
        assert job is not None and (job.status, job.error_code) == (
            "failed",
            "INVALID_OUTPUT:RESULT",
        )
        assert job.error_detail is not None and word in job.error_detail


def test_every_error_code_errands_writes_is_documented() -> None:
    """docs/states.md lists each code errands itself writes (the demo's own codes aside)."""
    import re

    root = Path(__file__).parents[2]
    written = set()
    for path in (root / "src" / "errands").rglob("*.py"):
        if path.name == "demo.py":
            continue
        written |= set(re.findall(r'"([A-Z][A-Z_]+:[A-Z][A-Za-z_]+)"', path.read_text()))
    documented = set(
        re.findall(
            r"^\| `([A-Z_]+:[A-Z_<>a-zA-Z]+)`", (root / "docs" / "states.md").read_text(), re.M
        )
    )
    assert {"HANDLER:BASE_EXCEPTION", "INVALID_OUTPUT:RESULT", "INVALID_OUTPUT:ERROR"} <= written
    assert written <= documented, written - documented
