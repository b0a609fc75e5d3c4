"""``errands.testing`` — FrozenClock, drain, eager — does what docs/testing.md says, on both
backends; and the doc's own example runs as written."""

from __future__ import annotations

import re
import signal
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import errands
from errands.testing import FrozenClock, drain, eager
from errands.worker import Worker
from helpers.support import get_job

ROOT = Path(__file__).resolve().parents[2]
T0 = 1_800_000_000.0


def test_frozen_clock_moves_only_when_told() -> None:
    clock = FrozenClock(T0)
    assert clock() == clock.now == T0
    assert clock.advance(30) == T0 + 30
    assert clock.advance(timedelta(minutes=1)) == T0 + 90
    assert clock() == T0 + 90
    assert clock.datetime() == datetime.fromtimestamp(T0 + 90, UTC)
    assert clock.datetime().tzinfo is UTC


def test_frozen_clock_starts_at_a_datetime() -> None:
    start = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert FrozenClock(start).now == start.timestamp()
    assert FrozenClock(start).datetime() == start


def test_frozen_clock_refuses_a_naive_datetime_as_run_at_does(
    make_queue: Callable[..., errands.Queue],
) -> None:
    naive = datetime(2030, 1, 2, 3, 4, 5)
    with pytest.raises(errands.ConfigurationError, match="naive datetime") as clock_error:
        FrozenClock(naive)
    q = make_queue()

    @q.task
    def later() -> None:
        pass

    with pytest.raises(errands.ConfigurationError, match="naive datetime") as run_at_error:
        q.enqueue("later", {}, run_at=naive)
    # One rule, one message: only the argument's name differs.
    assert str(clock_error.value).replace("FrozenClock start", "run_at") == str(run_at_error.value)


@pytest.fixture
def clock() -> FrozenClock:
    """This module's clock is the one errands.testing exports (conftest's is FixedClock)."""
    return FrozenClock(T0)


@pytest.fixture
def tq(make_queue: Callable[..., errands.Queue], clock: FrozenClock) -> errands.Queue:
    """A Queue on a FrozenClock with a task that fails its first attempt (retried in 60 s)."""
    q = make_queue(clock=clock)

    @q.task(max_attempts=3, backoff=errands.fixed(60))
    def flaky(n: int, ctx: errands.JobContext) -> int:
        if ctx.attempt == 1:
            raise ConnectionError("first attempt fails")
        return n * 2

    @q.task(queue="other")
    def elsewhere() -> str:
        return "ran"

    return q


def test_drain_runs_what_is_due_and_waits_for_the_clock(
    tq: errands.Queue, clock: FrozenClock
) -> None:
    now_id = tq.enqueue("flaky", {"n": 1})
    later_id = tq.enqueue("flaky", {"n": 2}, delay=3600)
    summary = drain(tq)
    assert isinstance(summary, errands.WorkerSummary)
    assert (summary.retried, summary.succeeded) == (1, 0)
    assert get_job(tq, now_id).status == "queued" and get_job(tq, now_id).attempts == 1
    assert get_job(tq, later_id).attempts == 0  # not due
    clock.advance(60)
    assert drain(tq).succeeded == 1
    done = get_job(tq, now_id)
    assert (done.status, done.attempts, done.result) == ("succeeded", 2, 2)
    assert get_job(tq, later_id).attempts == 0
    clock.advance(3600)
    drain(tq)
    assert get_job(tq, later_id).attempts == 1


def steps_of(monkeypatch: pytest.MonkeyPatch) -> list[float | None]:
    """What each step of every worker returns from now on: a number is a wait the loop
    sleeps (cut short only by a wake-up), None the end of a burst."""
    seen: list[float | None] = []
    step = Worker.tick

    def counted(self: Worker, now: float) -> float | None:
        seen.append(step(self, now))
        return seen[-1]

    monkeypatch.setattr(Worker, "tick", counted)
    return seen


def test_drain_with_a_schedule_never_sleeps_out_its_timer(
    tq: errands.Queue, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The scheduler runs every second: a burst that looked again after each of its passes
    # kept stepping until a claim fell between two passes (15 s per drain on PostgreSQL).
    @tq.periodic(every=60)
    def minutely() -> str:
        return "tick"

    steps = steps_of(monkeypatch)
    assert drain(tq).claimed == 0
    assert steps == [None]  # one step, no wait: nothing was due
    steps.clear()
    clock.advance(60)  # the schedule's tick falls due: the same step enqueues and claims it
    summary = drain(tq)
    assert summary.succeeded == 1 and tq.jobs(type="minutely")[0].result == "tick"
    assert steps[0] is not None and steps[-1] is None  # waited for the handler, then done
    steps.clear()
    assert drain(tq).claimed == 0 and steps == [None]


def test_drain_limits_itself_to_the_queues_given(tq: errands.Queue) -> None:
    job_id = tq.enqueue("elsewhere", {}, queue="other")
    assert drain(tq, queues=["default"]).claimed == 0
    assert get_job(tq, job_id).status == "queued"
    assert drain(tq, queues=["other"]).succeeded == 1
    assert get_job(tq, job_id).result == "ran"


def test_drain_leaves_signal_handlers_alone(tq: errands.Queue) -> None:
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    tq.enqueue("elsewhere", {}, queue="other")
    drain(tq)
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before


def test_eager_runs_each_enqueue_at_once(tq: errands.Queue, clock: FrozenClock) -> None:
    with eager(tq):
        one = tq.enqueue("elsewhere", {}, queue="other")
        assert get_job(tq, one).status == "succeeded"
        ids = tq.enqueue_many([("elsewhere", {}, {"queue": "other"}), ("flaky", {"n": 3})])
        assert get_job(tq, ids[0]).status == "succeeded"
        assert get_job(tq, ids[1]).attempts == 1  # ran once; its retry is not due yet
        clock.advance(60)
        tq.enqueue("elsewhere", {}, queue="other")  # any enqueue drains what is due
        assert get_job(tq, ids[1]).status == "succeeded"
    after = tq.enqueue("elsewhere", {}, queue="other")
    assert get_job(tq, after).status == "queued"  # outside the block, nothing runs by itself
    assert "enqueue" not in vars(tq) and "enqueue_many" not in vars(tq)


def test_eager_runs_jobs_enqueued_through_a_task(tq: errands.Queue) -> None:
    # docs/testing.md: "also through task.enqueue" — a Task enqueues through its Queue as it
    # is at call time, so eager's wrapped verbs are the ones it reaches.
    elsewhere = tq.tasks["elsewhere"]
    with eager(tq):
        plain = elsewhere.enqueue()
        with_options = elsewhere.with_options(priority=5).enqueue()
    assert [get_job(tq, i).status for i in (plain, with_options)] == ["succeeded"] * 2
    assert get_job(tq, elsewhere.enqueue()).status == "queued"  # after the block: stored only


def test_eager_restores_the_queue_after_an_error(tq: errands.Queue) -> None:
    with pytest.raises(RuntimeError, match="boom"), eager(tq):
        raise RuntimeError("boom")
    assert "enqueue" not in vars(tq) and "enqueue_many" not in vars(tq)


def test_the_documented_example_runs(tmp_path: Path) -> None:
    text = (ROOT / "docs" / "testing.md").read_text()
    (example,) = [
        block for block in re.findall(r"```python\n(.*?)```", text, re.S) if "test_emails" in block
    ]
    namespace: dict[str, Any] = {}
    exec(compile(example, "docs/testing.md", "exec"), namespace)  # the doc's own code
    tests = sorted(name for name in namespace if name.startswith("test_"))
    assert tests == ["test_eager", "test_send_email_is_retried"]
    for i, name in enumerate(tests):
        path = tmp_path / str(i)
        path.mkdir()
        namespace[name](path)


def test_the_documented_periodic_example_runs(tmp_path: Path) -> None:
    text = (ROOT / "docs" / "testing.md").read_text()
    (example,) = [b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "test_sync" in b]
    namespace: dict[str, Any] = {}
    exec(compile(example, "docs/testing.md", "exec"), namespace)  # the doc's own code
    namespace["test_sync_runs_every_five_minutes"](tmp_path)  # a Path, as the page passes it


@pytest.mark.parametrize(("catch_up", "runs"), [("skip", 0), ("once", 1)])
def test_a_jump_over_a_tick_enqueues_what_docs_testing_md_says(
    db_url: str, catch_up: str, runs: int
) -> None:
    clock = FrozenClock(datetime(2026, 1, 1, 9, 0, tzinfo=UTC))
    with errands.Queue(db_url, clock=clock) as q:
        q.periodic(every=timedelta(minutes=5), name="sync", catch_up=catch_up)(lambda: None)
        drain(q)
        clock.advance(600)
        drain(q)
        drain(q)
        assert len(q.jobs(type="sync")) == runs


def test_drain_and_eager_run_steps_sleeps_and_signals(
    make_queue: Callable[..., errands.Queue],
) -> None:
    """Durable steps in tests (docs/durable-steps.md): a sleep ends once a FrozenClock passes
    its wake time, a wait's timeout once the clock passes it (drain runs the rescuer), and
    under eager a signal resumes its job before q.signal returns."""
    clock = FrozenClock(T0)
    q = make_queue(clock=clock)
    seen: list[Any] = []

    @q.task()
    def flow(ctx: errands.JobContext) -> None:
        ctx.step("one", seen.append, "one")
        ctx.sleep(600)
        try:
            seen.append(ctx.wait_for("go", timeout=60))
        except errands.SignalTimeout:
            seen.append("timeout")

    with eager(q):
        first = flow.enqueue()
        assert seen == ["one"] and get_job(q, first).status == "queued"
        clock.advance(600)
        drain(q)
        assert get_job(q, first).status == "waiting"
        q.signal(first, "go", {"n": 1})
        assert seen == ["one", {"n": 1}] and get_job(q, first).status == "succeeded"
    second = flow.enqueue()
    drain(q)
    clock.advance(600)
    drain(q)
    assert get_job(q, second).status == "waiting"
    clock.advance(61)
    drain(q)
    assert get_job(q, second).status == "succeeded"
    assert seen == ["one", {"n": 1}, "one", "timeout"]
