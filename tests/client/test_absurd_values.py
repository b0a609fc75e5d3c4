"""Absurd values at every public entry point: an ErrandsError subclass (a ValueError too) that
names the argument, on one line, and nothing written — on both backends. A time already stored
out of range (by hand, or by an older errands) still reads."""

from __future__ import annotations

import math
import sqlite3
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

import errands
from errands.core import validate
from helpers.support import FixedClock, get_job

HUGE = 2**63
ENQUEUE_CASES: list[tuple[str, dict[str, Any], str]] = [
    ("delay inf", {"delay": float("inf")}, "delay must be >= 0"),
    ("delay 1e300", {"delay": 1e300}, "delay must be >= 0"),
    ("delay nan", {"delay": float("nan")}, "delay must be >= 0"),
    ("delay negative", {"delay": -5}, "delay must be >= 0"),
    ("delay string", {"delay": "5x"}, "delay must be seconds"),
    ("delay numeric string", {"delay": "5"}, "delay must be seconds"),
    ("delay bool", {"delay": True}, "delay must be seconds"),
    ("delay huge int", {"delay": 10**400}, "delay must be >= 0"),
    ("delay huge timedelta", {"delay": timedelta.max}, "delay must be >= 0"),
    ("run_at year 10000 epoch", {"run_at": 253402300800.0}, "years 1-9999"),
    ("run_at inf", {"run_at": float("inf")}, "years 1-9999"),
    ("run_at nan", {"run_at": float("nan")}, "years 1-9999"),
    (
        "run_at 9999 in a zone west of UTC",
        {"run_at": datetime(9999, 12, 31, 23, 0, tzinfo=timezone(timedelta(hours=-5)))},
        "years 1-9999",
    ),
    ("run_at naive", {"run_at": datetime(2030, 1, 1)}, "naive datetime"),
    ("run_at string", {"run_at": "2030-01-01"}, "aware datetime or unix seconds"),
    ("run_at and delay", {"run_at": 1.0, "delay": 1.0}, "not both"),
    ("priority 2**63", {"priority": HUGE}, "priority must be between"),
    ("priority 2**31", {"priority": 2**31}, "priority must be between"),
    ("priority float", {"priority": 1.5}, "priority must be a whole number"),
    ("priority string", {"priority": "10"}, "priority must be a whole number"),
    ("max_attempts 2**63", {"max_attempts": HUGE}, "max_attempts must be between"),
    ("max_attempts 0", {"max_attempts": 0}, "max_attempts must be between"),
    ("max_attempts float", {"max_attempts": 3.0}, "max_attempts must be a whole number"),
    ("queue empty", {"queue": ""}, "queue must be a non-empty string"),
    ("queue NUL", {"queue": "a\x00b"}, "NUL character"),
    ("queue surrogate", {"queue": "a\udc80"}, "lone surrogate"),
    ("queue too long", {"queue": "q" * 300}, "at most 255"),
    ("unique_key NUL", {"unique_key": "k\x00"}, "NUL character"),
    ("unique_key too long", {"unique_key": "k" * 2000}, "at most 1024"),
    ("unique_key int", {"unique_key": 5}, "unique_key must be a non-empty string"),
]


def _rows(q: errands.Queue) -> int:
    return len(q.jobs(limit=1000))


@pytest.mark.parametrize(
    ("case", "kwargs", "message"), ENQUEUE_CASES, ids=[c[0] for c in ENQUEUE_CASES]
)
def test_enqueue_refuses_absurd_options_and_writes_nothing(
    queue: errands.Queue, case: str, kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(errands.ConfigurationError, match=message) as raised:
        queue.enqueue("t", {}, **kwargs)
    assert isinstance(raised.value, ValueError)
    assert "\n" not in str(raised.value)
    assert _rows(queue) == 0


@pytest.mark.parametrize(
    ("case", "kwargs", "message"), ENQUEUE_CASES, ids=[c[0] for c in ENQUEUE_CASES]
)
def test_enqueue_many_refuses_the_same_with_the_item_index_and_writes_nothing(
    queue: errands.Queue, case: str, kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(errands.ConfigurationError, match=f"item 1: .*{message}"):
        queue.enqueue_many([("t", {}), ("t", {}, kwargs)])
    assert _rows(queue) == 0


@pytest.mark.parametrize(
    ("case", "kwargs", "message"),
    ENQUEUE_CASES,
    ids=[c[0] for c in ENQUEUE_CASES],
)
def test_with_options_refuses_the_same_when_given(
    sqlite_path: str, case: str, kwargs: dict[str, Any], message: str
) -> None:
    # Checked when the options are built, before any backend is involved: one backend will do.
    with errands.Queue(sqlite_path) as queue:

        @queue.task
        def t() -> None: ...

        with pytest.raises(errands.ConfigurationError, match=message):
            t.with_options(**kwargs).enqueue()
        assert _rows(queue) == 0


def test_a_delay_that_ends_past_year_9999_is_refused(
    make_queue: Callable[..., errands.Queue],
) -> None:
    q = make_queue(clock=FixedClock(validate.MAX_EPOCH - 10))
    with pytest.raises(errands.ConfigurationError, match="past 9999-12-31"):
        q.enqueue("t", {}, delay=60)
    q.enqueue("t", {}, delay=10)  # exactly the last storable second
    assert [j.run_at for j in q.jobs()] == [datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)]


def test_stored_options_at_the_edges_of_the_ranges_round_trip(queue: errands.Queue) -> None:
    last = datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)
    ids = [
        queue.enqueue("t", {}, priority=2**31 - 1, max_attempts=validate.MAX_ATTEMPTS_MAX),
        queue.enqueue("t", {}, priority=-(2**31), run_at=last),
        queue.enqueue("t", {}, run_at=datetime(1, 1, 1, tzinfo=UTC)),
    ]
    jobs = [get_job(queue, i) for i in ids]
    assert [(j.priority, j.max_attempts) for j in jobs[:1]] == [(2**31 - 1, 1_000_000)]
    assert jobs[1].run_at == last
    assert jobs[2].run_at == datetime(1, 1, 1, tzinfo=UTC)


def test_enqueue_many_refuses_unknown_options_and_non_lists(queue: errands.Queue) -> None:
    with pytest.raises(errands.ConfigurationError, match=r"item 0: unknown option.*dealy"):
        queue.enqueue_many([("t", {}, {"dealy": 5})])
    with pytest.raises(errands.ConfigurationError, match="options must be a dict"):
        queue.enqueue_many([("t", {}, ["delay", 5])])  # type: ignore[list-item]
    with pytest.raises(errands.ConfigurationError, match="list of"):
        queue.enqueue_many(None)  # type: ignore[arg-type]
    with pytest.raises(errands.ConfigurationError, match="list of"):
        queue.enqueue_many({"t": {}})  # type: ignore[dict-item]
    assert _rows(queue) == 0


def test_with_options_refuses_an_unknown_option(queue: errands.Queue) -> None:
    @queue.task
    def t() -> None: ...

    with pytest.raises(errands.ConfigurationError, match=r"unknown option.*dealy.*use.*delay"):
        t.with_options(dealy=5)
    with pytest.raises(errands.ConfigurationError, match="unknown option"):
        t.with_options(delay=5).with_options(prio=1)


TASK_CASES: list[tuple[dict[str, Any], str]] = [
    ({"priority": HUGE}, "priority must be between"),
    ({"max_attempts": 0}, "max_attempts must be between"),
    ({"max_attempts": "3"}, "max_attempts must be a whole number"),
    ({"timeout": float("inf")}, "timeout must be > 0"),
    ({"timeout": -1}, "timeout must be > 0"),
    ({"timeout": "60"}, "timeout must be seconds"),
    ({"queue": ""}, "queue must be a non-empty string"),
    ({"backoff": 5}, "backoff must be a callable"),
    ({"retry_on": (ValueError, "nope")}, "retry_on must be exception classes"),
    ({"discard_on": 3}, "discard_on must be exception classes"),
    ({"name": ""}, "task name must be a non-empty string"),
]


@pytest.mark.parametrize(("kwargs", "message"), TASK_CASES)
def test_task_options_are_checked_when_registered(
    sqlite_path: str, kwargs: dict[str, Any], message: str
) -> None:
    with errands.Queue(sqlite_path) as queue:
        with pytest.raises(errands.ConfigurationError, match=message):

            @queue.task(**kwargs)
            def t() -> None: ...

        assert "t" not in queue.tasks


SETTINGS_CASES: list[tuple[dict[str, Any], str]] = [
    ({"lease_seconds": float("inf")}, "lease_seconds must be > 0"),
    ({"lease_seconds": 1e300}, "lease_seconds must be > 0"),
    ({"lease_seconds": "60"}, "lease_seconds must be seconds"),
    ({"heartbeat_seconds": float("nan")}, "heartbeat_seconds must be > 0"),
    ({"poll_interval": 0}, "poll_interval must be > 0"),
    ({"poll_interval": -1}, "poll_interval must be > 0"),
    ({"shutdown_timeout": float("inf")}, "shutdown_timeout must be >= 0"),
    ({"busy_timeout": 1e9}, "busy_timeout must be > 0 and at most 2147483"),
    ({"max_payload_bytes": "10"}, "max_payload_bytes must be a whole number"),
    ({"max_payload_bytes": 0}, "max_payload_bytes must be between"),
    ({"max_payload_bytes": HUGE}, "max_payload_bytes must be between"),
    ({"retention": {"succeeded": float("inf")}}, r"retention\['succeeded'\] must be > 0"),
    ({"retention": {"succeeded": "30d"}}, r"retention\['succeeded'\] must be seconds"),
    ({"retention": 5}, "retention must be a mapping"),
    ({"audit": "ENQUEUED"}, "audit must be a collection"),
    ({"audit": 5}, "audit must be a collection"),
    ({"durability": 1}, "durability must be"),
    ({"allow_network_filesystem": "no"}, "allow_network_filesystem must be True or False"),
    ({"clock": 5}, "clock must be a function"),
]


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
@pytest.mark.parametrize(("kwargs", "message"), SETTINGS_CASES)
def test_queue_settings_are_checked_before_the_database_is_opened(
    backend: str, tmp_path: Any, kwargs: dict[str, Any], message: str
) -> None:
    # Nothing is opened: a file that must not appear, a server port where nothing listens.
    url = str(tmp_path / "never.db") if backend == "sqlite" else "postgresql://u@127.0.0.1:1/x"
    with pytest.raises(errands.ConfigurationError, match=message):
        errands.Queue(url, **kwargs)
    assert not (tmp_path / "never.db").exists()


def test_reads_and_actions_refuse_ids_no_job_can_have(queue: errands.Queue) -> None:
    for bad in (99999999999999999999, 0, -1):
        with pytest.raises(errands.ConfigurationError, match="job id must be between 1 and"):
            queue.get(bad)
    with pytest.raises(errands.ConfigurationError, match="job id must be a whole number"):
        queue.get("5")  # type: ignore[arg-type]
    for call in (queue.attempts, queue.events, queue.cancel, queue.retry):
        with pytest.raises(errands.ConfigurationError, match="job id"):
            call(2**64)
    assert queue.get(2**63 - 1) is None  # the largest id is a fine question with no answer


READ_CASES: list[tuple[Callable[[errands.Queue], Any], str]] = [
    (lambda q: q.jobs(limit=10**20), "limit must be between"),
    (lambda q: q.jobs(limit=1e20), "limit must be a whole number"),  # type: ignore[arg-type]
    (lambda q: q.jobs(limit=0), "limit must be between"),
    (lambda q: q.jobs(before_id=2**70), "before_id must be between"),
    (lambda q: q.jobs(type=5), "type must be a string"),  # type: ignore[arg-type]
    (lambda q: q.prune(batch_size=0), "batch_size must be between"),
    (lambda q: q.prune(batch_size=10**30), "batch_size must be between"),
    (lambda q: q.prune(now=float("inf")), "years 1-9999"),
    (lambda q: q.stats(window=float("inf")), "window must be > 0"),
    (lambda q: q.stats(top=0), "top must be between"),
    (lambda q: q.errors(top=2**40), "top must be between"),
    (lambda q: q.errors(since="1d"), "since must be seconds"),  # type: ignore[arg-type]
    (lambda q: q.run_worker(concurrency=0), "concurrency must be between"),
    (lambda q: q.run_worker(concurrency="8"), "concurrency must be a whole number"),  # type: ignore[arg-type]
    (lambda q: q.run_worker(queues=[""]), "queue must be a non-empty string"),
]


@pytest.mark.parametrize(("call", "message"), READ_CASES)
def test_reads_and_operations_refuse_absurd_arguments(
    queue: errands.Queue, call: Callable[[errands.Queue], Any], message: str
) -> None:
    queue.enqueue("t", {})
    before = [j.to_dict() for j in queue.jobs()]
    with pytest.raises(errands.ConfigurationError, match=message):
        call(queue)
    assert [j.to_dict() for j in queue.jobs()] == before


BACKOFF_CASES: list[tuple[Callable[[], Any], str]] = [
    (lambda: errands.exponential(cap=float("inf")), "backoff cap must be >= 0"),
    (lambda: errands.exponential(base=1e300), "base must be between 1 and 10000"),
    (lambda: errands.linear(step="10"), "backoff step must be seconds"),  # type: ignore[arg-type]
    (lambda: errands.fixed(float("nan")), "backoff delay must be >= 0"),
]


@pytest.mark.parametrize(("make", "message"), BACKOFF_CASES)
def test_backoff_factories_refuse_absurd_values(make: Callable[[], Any], message: str) -> None:
    with pytest.raises(errands.ConfigurationError, match=message) as raised:
        make()
    assert isinstance(raised.value, ValueError)


def test_a_backoff_returning_infinity_falls_back_to_the_default_instead_of_storing_it(
    queue: errands.Queue,
) -> None:
    @queue.task(max_attempts=3, backoff=lambda attempt: math.inf)
    def flaky() -> None:
        raise RuntimeError("boom")

    job_id = flaky.enqueue()
    queue.run_worker(concurrency=1, burst=True, handle_signals=False)
    job = queue.get(job_id)
    assert job is not None and (job.status, job.attempts) == ("queued", 1)
    (attempt,) = queue.attempts(job_id)
    assert job.run_at is not None and attempt.finished_at is not None
    # the default backoff after attempt 1: 2 s with jitter
    assert 0 < (job.run_at - attempt.finished_at).total_seconds() <= 2 * 1.2 + 1
    assert [e.event for e in queue.events(job_id)][-1] == "RETRY_SCHEDULED"


def test_a_time_stored_out_of_range_by_hand_still_reads(sqlite_path: str) -> None:
    """SQLite stores REAL seconds, so a row written by hand can hold any number; PostgreSQL's
    timestamptz refuses them at write (errands never sends one: see the tests above)."""
    with errands.Queue(sqlite_path) as q:
        ids = [q.enqueue("t", {}) for _ in range(3)]
        conn = sqlite3.connect(sqlite_path)
        conn.execute("UPDATE jobs SET run_at = 1e300 WHERE id = ?", (ids[0],))
        conn.execute("UPDATE jobs SET run_at = -1e300, created_at = 'nan' WHERE id = ?", (ids[1],))
        conn.execute("UPDATE jobs SET started_at = 9e999 WHERE id = ?", (ids[2],))
        conn.commit()
        conn.close()
        jobs = {j.id: j for j in q.jobs()}
        assert jobs[ids[0]].run_at == datetime.max.replace(tzinfo=UTC)
        assert jobs[ids[1]].run_at == datetime.min.replace(tzinfo=UTC)
        assert jobs[ids[2]].started_at == datetime.max.replace(tzinfo=UTC)
        assert q.get(ids[0]) is not None and [e.event for e in q.events(ids[0])] == ["ENQUEUED"]
        assert q.stats()["counts"]["queued"] == 3


# -- the command line: one line, exit 2, nothing written ---------------------------------

CLI_CASES: list[tuple[list[str], str]] = [
    # One duration parser for every flag (cli/common.duration): digits with an optional unit.
    (["enqueue", "t", "--delay", "1e308"], "--delay: '1e308' is not a duration"),
    (["enqueue", "t", "--delay", "inf"], "--delay: 'inf' is not a duration"),
    (["enqueue", "t", "--delay", "nan"], "--delay: 'nan' is not a duration"),
    (["enqueue", "t", "--delay", "5x"], "--delay: '5x' is not a duration"),
    (["enqueue", "t", "--delay", "9" * 400], "is longer than 31536000000 seconds"),
    (["enqueue", "t", "--delay", "-5"], "--delay: '-5' is not a duration"),
    (["enqueue", "t", "--priority", str(2**63)], "--priority: must be between"),
    (["enqueue", "t", "--max-attempts", str(2**63)], "--max-attempts: must be between"),
    (["enqueue", "t", "--queue", ""], "queue must be a non-empty string"),
    (["enqueue", "t", "--unique-key", "k" * 2000], "unique_key is 2000 bytes"),
    (["show", "99999999999999999999"], "ID: must be between 1 and"),
    (["show", "0"], "ID: must be between 1 and"),
    (["jobs", "--limit", "1e20"], "'1e20' is not a whole number"),
    (["jobs", "--limit", "100000000000000000000"], "--limit: must be between"),
    (["retry", "99999999999999999999"], "must be between 1 and"),
    (["cancel", "99999999999999999999"], "must be between 1 and"),
    (["prune", "--batch-size", "0"], "--batch-size: must be between 1 and"),
    (["prune", "--batch-size", "10000000000000000000000"], "--batch-size: must be between"),
    (["stats", "--top", "0"], "--top: must be between"),
    (["stats", "--window", "9" * 400], "longer than"),
    (["errors", "--since", "99999999999999w"], "longer than"),
    (["check", "--max-failure-rate", "nan"], "must be between 0 and 1"),
    (["check", "--min-finished", "-1"], "--min-finished: must be between 0 and"),
    (["graduate", "--to", "postgresql://u@127.0.0.1:1/x", "--batch-size", "0"], "between 1"),
]


@pytest.mark.parametrize(
    ("argv", "message"), CLI_CASES, ids=[" ".join(c[0])[:50] for c in CLI_CASES]
)
def test_the_cli_refuses_absurd_values_with_one_line_and_exit_2(
    queue: errands.Queue,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    message: str,
) -> None:
    from errands.cli import main

    existing = queue.enqueue("t", {})
    before = [j.to_dict() for j in queue.jobs()]
    capsys.readouterr()
    try:
        code = main([*argv, "--db", queue.url])
    except SystemExit as exc:  # argparse's own usage errors
        code = exc.code  # type: ignore[assignment]
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("errands: ") and message in last, err
    assert [j.to_dict() for j in queue.jobs()] == before
    assert queue.get(existing) is not None


def test_clock_none_is_the_default_clock(make_queue: Callable[..., errands.Queue]) -> None:
    # None means "the default" for every other setting; clock=None was refused as "not a
    # function" (docs/reference/settings.md).
    q = make_queue(clock=None)
    assert q.clock is time.time
    job = q.get(q.enqueue("t", {}))
    assert job is not None and job.status == "queued"
