"""Flow control in one process, both backends (docs/flow-control.md): pauses, limits and rates
as the claim applies them, snooze, progress. The cross-process promises are
tests/runtime/test_flow_*.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

import errands
from errands.backends.base import ClaimedJob, ClaimRequest
from errands.context import JobContext
from errands.worker import Worker
from helpers.support import FixedClock, is_sqlite

LIMITED = ["a", "b", "c", "r", "free"]


def app(q: errands.Queue) -> dict[str, Any]:
    """Tasks: ``a`` (key k, running 2), ``b`` (key t, running 1 per tenant), ``c`` (shares
    key k with a), ``r`` (key smtp, 3 starts in any 10 s), ``free`` (no limit)."""
    k = errands.Limit("k", running=2)

    @q.task(limit=k)
    def a(n: int = 0) -> None: ...

    @q.task(limit=errands.Limit("t", running=1, group="tenant"))
    def b(tenant: Any = None) -> None: ...

    @q.task(limit=k, priority=5)
    def c(n: int = 0) -> None: ...

    @q.task(limit=errands.Limit("smtp", rate=(3, 10)))
    def r(n: int = 0) -> None: ...

    @q.task(queue="other")
    def free(n: int = 0) -> None: ...

    return {"a": a, "b": b, "c": c, "r": r, "free": free}


def claim(q: errands.Queue, n: int = 100, worker: str = "w1") -> list[ClaimedJob]:
    limits = [t.options.limit.spec() for t in q.tasks.values() if t.options.limit]
    q.backend.register_limits(list({s.key: s for s in limits}.values()), q.clock())
    request = ClaimRequest(worker, LIMITED, None, n, 60.0, True)
    return q.backend.claim(request, q.clock())


def succeed(
    q: errands.Queue, jobs: list[ClaimedJob], worker: str = "w1", started: float | None = None
) -> None:
    """Succeed the jobs as a worker does (with the jobs it holds), their handlers having
    started at ``started`` (default: now)."""
    from errands.backends.base import Succeeded

    now = q.clock()
    begun = now if started is None else started
    outcomes = [Succeeded(j.id, j.attempt, begun, None) for j in jobs]
    q.backend.finish(outcomes, worker, now, held=jobs)


# -- pause ---------------------------------------------------------------------------------


def test_a_paused_queue_is_not_claimed_and_resume_lets_it_go(
    clocked_queue: errands.Queue,
) -> None:
    q = clocked_queue
    t = app(q)
    t["free"].enqueue(n=1)
    t["a"].enqueue(n=1)  # queue 'default'
    q.pause("other", reason="downstream down")
    assert [j.type for j in claim(q)] == ["a"]
    (info,) = [i for i in q.queues() if i.name == "other"]
    assert info.paused and info.reason == "downstream down" and info.paused_by == "api"
    assert info.paused_at == q.clock() and info.counts == {"queued": 1, "running": 0}
    # Enqueue goes on while paused, and so does everything but the claim.
    t["free"].enqueue(n=2)
    assert claim(q) == []
    assert q.backend.next_due(["free"], None) is None  # a burst worker sees nothing due
    assert q.resume("other") is True
    assert q.resume("other") is False
    assert [j.type for j in claim(q)] == ["free", "free"]


def test_star_pauses_every_queue_and_resume_star_lifts_every_pause(
    clocked_queue: errands.Queue,
) -> None:
    q = clocked_queue
    t = app(q)
    t["free"].enqueue()
    t["a"].enqueue()
    q.pause("default", reason="one")
    q.pause("*", reason="all", actor="ops")
    assert claim(q) == []
    infos = {i.name: i for i in q.queues()}
    assert infos["*"].paused and infos["other"].paused and infos["other"].reason == "all"
    assert infos["default"].reason == "one"  # its own pause shows
    q.resume("default")
    assert claim(q) == []  # '*' still holds it
    assert q.resume("*")
    assert len(claim(q)) == 2
    assert not any(i.paused for i in q.queues())


def test_burst_worker_returns_with_its_queue_paused_and_runs_it_after_resume(
    queue: errands.Queue,
) -> None:
    ran: list[int] = []

    @queue.task
    def job(n: int) -> None:
        ran.append(n)

    job.enqueue(n=1)
    queue.pause("default")
    queue.run_worker(burst=True, concurrency=1)
    assert ran == [] and queue.get(1) is not None and queue.get(1).status == "queued"  # type: ignore[union-attr]
    queue.resume("default")
    queue.run_worker(burst=True, concurrency=1)
    assert ran == [1]


def test_resume_wakes_an_idle_worker(
    queue: errands.Queue, make_queue: Callable[..., errands.Queue]
) -> None:
    # poll_interval far longer than the test: only the wake-up can make the worker claim.
    worker_q = make_queue(poll_interval=60.0)
    done = threading.Event()

    @worker_q.task
    def job() -> None:
        done.set()

    queue.pause("default")
    queue.enqueue("job", {})
    from errands.worker import Worker

    w = Worker(worker_q, concurrency=1, handle_signals=False)
    th = threading.Thread(target=w.run, daemon=True)
    th.start()
    try:
        time.sleep(1.0)  # the worker has claimed (nothing: paused) and sleeps for its poll
        assert not done.is_set()
        queue.resume("default")
        assert done.wait(10), "resume did not wake the idle worker"
    finally:
        w.stop()
        th.join(30)


# -- concurrency limits ----------------------------------------------------------------------


def test_a_running_limit_caps_claims_and_a_finish_frees_a_slot(
    clocked_queue: errands.Queue,
) -> None:
    q = clocked_queue
    t = app(q)
    for n in range(5):
        t["a"].enqueue(n=n)
    t["c"].enqueue(n=99)  # shares key k, higher priority
    first = claim(q)
    assert sorted(j.type for j in first) == ["a", "c"]  # priority orders within the limit
    assert claim(q) == []  # saturated: no attempt used, nothing moves
    assert q.backend.get_job(3).attempts == 0  # type: ignore[union-attr]
    succeed(q, first[:1])
    assert len(claim(q)) == 1
    assert claim(q) == []


def test_groups_have_their_own_cap(clocked_queue: errands.Queue) -> None:
    q = clocked_queue
    t = app(q)
    for tenant in ["x", "x", "y", "y", 7, 7, None]:
        t["b"].enqueue(tenant=tenant)
    got = claim(q)
    groups = sorted(q.backend.get_job(j.id).limit_group or "" for j in got)  # type: ignore[union-attr]
    assert groups == ["", "7", "x", "y"]
    assert claim(q) == []


def test_no_head_of_line_blocking_behind_a_saturated_key(clocked_queue: errands.Queue) -> None:
    q = clocked_queue
    t = app(q)
    q.enqueue_many([("a", {"n": n}) for n in range(2000)])
    first = claim(q, n=10)
    assert len(first) == 2  # k is saturated
    t["free"].enqueue(n=1)
    t["b"].enqueue(tenant="x")
    got = claim(q, n=10)
    assert sorted(j.type for j in got) == ["b", "free"]  # 1998 waiting jobs block nothing


def test_set_limit_wins_over_code_until_cleared_and_running_zero_holds(
    clocked_queue: errands.Queue,
) -> None:
    q = clocked_queue
    t = app(q)
    for n in range(6):
        t["a"].enqueue(n=n)
    q.set_limit("k", running=0, actor="ops")
    assert claim(q) == []
    (info,) = [i for i in q.limits() if i.key == "k"]
    assert (info.running, info.source, info.set_by, info.code_running) == (0, "set", "ops", 2)
    assert info.groups == {"": {"running": 0, "waiting": 6}}
    q.set_limit("k", running=3)
    assert len(claim(q)) == 3
    assert q.clear_limit("k") is True and q.clear_limit("k") is False
    assert claim(q) == []  # the code's 2: lowering never stops the 3 running
    (info,) = [i for i in q.limits() if i.key == "k"]
    assert (info.running, info.source) == (2, "code")
    assert info.groups[""] == {"running": 3, "waiting": 3}


def test_lease_recovery_frees_the_slot_and_a_stale_outcome_frees_nothing(
    clocked_queue: errands.Queue, clock: FixedClock
) -> None:
    from errands.backends.base import Succeeded

    q = clocked_queue
    t = app(q)
    for n in range(4):
        t["a"].enqueue(n=n)
    held = claim(q, worker="dead")
    assert len(held) == 2 and claim(q) == []
    clock.advance(61)  # both leases expire; the rescuer requeues them
    q.backend.rescue(q.clock())
    again = claim(q, worker="w2")
    assert len(again) == 2 and claim(q) == []
    # The dead worker's late outcomes are refused by the fence: no slot is freed by them.
    now = q.clock()
    applied = q.backend.finish([Succeeded(j.id, j.attempt, now, None) for j in held], "dead", now)
    assert applied == [False, False]
    assert claim(q) == []


def test_limit_definitions_must_make_sense() -> None:
    with pytest.raises(errands.ConfigurationError, match="caps nothing"):
        errands.Limit("k")
    with pytest.raises(errands.ConfigurationError, match="rate must be"):
        errands.Limit("k", rate=(0, 60))
    with pytest.raises(errands.ConfigurationError, match="rate must be"):
        errands.Limit("k", rate=(5, -1))
    with pytest.raises(errands.ConfigurationError, match="limit key"):
        errands.Limit("", running=1)


def test_tasks_sharing_a_key_must_agree(queue: errands.Queue) -> None:
    @queue.task(limit=errands.Limit("k", running=1))
    def one() -> None: ...

    @queue.task(limit=errands.Limit("k", running=2))
    def two() -> None: ...

    with pytest.raises(errands.ConfigurationError, match="different caps"):
        queue.run_worker(burst=True)


def test_processes_declaring_different_caps_for_a_key_are_refused_while_the_first_lives(
    make_queue: Callable[..., errands.Queue], clock: FixedClock
) -> None:
    # Two processes (two Queues on one database, as two deploys would open it) whose code
    # declares running=2 and running=5 for one key: the last to start used to win silently.
    first = make_queue(clock=clock, lease_seconds=30)
    later = make_queue(clock=clock, lease_seconds=30)
    same = make_queue(clock=clock, lease_seconds=30)
    for q, cap in ((first, 2), (later, 5), (same, 2)):

        @q.task(limit=errands.Limit("api", running=cap))
        def call() -> None: ...

    running = Worker(first, handle_signals=False, monotonic=clock)  # its timers: this clock
    running.start()
    try:
        with pytest.raises(errands.ConfigurationError) as refused:
            later.run_worker(burst=True, handle_signals=False)
        message = str(refused.value)
        assert "running=5" in message and "running=2" in message and "'api'" in message
        assert "\n" not in message
        assert later.backend.live_workers(clock(), 30) == [
            first.backend.live_workers(clock(), 30)[0]
        ]
        (info,) = later.limits()
        assert info.running == 2  # the first's caps stay in force
        same.run_worker(burst=True, handle_signals=False)  # agreeing processes start
        clock.advance(20)
        running.tick(clock())  # its heartbeat: still declared, still live
        clock.advance(20)
        with pytest.raises(errands.ConfigurationError):
            later.run_worker(burst=True, handle_signals=False)
    finally:
        running.stop()
        running.close()
    clock.advance(31)  # no heartbeat for a lease: that declaration has lapsed
    later.run_worker(burst=True, handle_signals=False)
    (info,) = later.limits()
    assert info.running == 5


def test_a_worker_learns_that_its_caps_were_replaced(queue: errands.Queue) -> None:
    spec = errands.Limit("api", running=2).spec()
    queue.backend.register_limits([spec], queue.clock())
    assert queue.backend.refresh_limits([spec], queue.clock()) == []
    queue.backend.register_limits([errands.Limit("api", running=3).spec()], queue.clock())
    assert queue.backend.refresh_limits([spec], queue.clock()) == ["api"]


# -- rate limits ------------------------------------------------------------------------------


def test_a_rate_limit_is_a_strict_sliding_window(
    clocked_queue: errands.Queue, clock: FixedClock
) -> None:
    q = clocked_queue
    t = app(q)
    for n in range(10):
        t["r"].enqueue(n=n)
    got = claim(q)
    assert len(got) == 3 and all(j.claimed_at == q.clock() for j in got)
    succeed(q, got)
    clock.advance(5)
    assert claim(q) == []  # finished or not, 3 started in the last 10 s
    clock.advance(4.999)
    assert claim(q) == []
    clock.advance(0.001)  # the first three leave the window exactly now
    assert len(claim(q)) == 3
    clock.advance(9.9)
    assert claim(q) == []


def test_a_rate_limit_with_a_group_counts_each_group_alone(
    clocked_queue: errands.Queue, clock: FixedClock
) -> None:
    q = clocked_queue

    @q.task(limit=errands.Limit("per-user", rate=(1, 60), group="user"))
    def notify(user: str) -> None: ...

    for user in ["ann", "ann", "bob", "bob"]:
        notify.enqueue(user=user)
    request = ClaimRequest("w", ["notify"], None, 10, 60.0, True)
    q.backend.register_limits([notify.options.limit.spec()], q.clock())  # type: ignore[union-attr]
    got = q.backend.claim(request, q.clock())
    assert sorted(q.get(j.id).limit_group for j in got) == ["ann", "bob"]  # type: ignore[union-attr,type-var]
    succeed(q, got, "w")
    clock.advance(59)
    assert q.backend.claim(request, q.clock()) == []
    clock.advance(1)
    assert len(q.backend.claim(request, q.clock())) == 2


@pytest.mark.parametrize("written_by", ["outcome", "heartbeat"])
def test_the_window_counts_the_handlers_start_not_the_claim(
    clocked_queue: errands.Queue, clock: FixedClock, written_by: str
) -> None:
    q = clocked_queue
    t = app(q)
    t0 = q.clock()
    for n in range(6):
        t["r"].enqueue(n=n)
    got = claim(q)  # 3 in any 10 s
    assert len(got) == 3
    clock.advance(10)
    # Claimed 10 s ago, not started yet (waiting for a runner): they may still start up to a
    # lease (60 s here) after their claim, so the window still counts them.
    assert claim(q) == []
    # Their handlers started 2 s after the claim: written with their outcome, or while they
    # still run (the worker's heartbeat).
    if written_by == "outcome":
        succeed(q, got, started=t0 + 2)
    else:
        q.backend.record_starts([(j.id, t0, t0 + 2) for j in got])
    assert claim(q) == []  # the window (t0, t0 + 10] holds their starts
    clock.now = t0 + 12
    assert len(claim(q)) == 3


def test_every_group_starts_however_many_wait(clocked_queue: errands.Queue) -> None:
    # A claim visits at most MAX_GROUPS (1,000) groups; the next resumes where it stopped and
    # wraps round, so groups past the 1,000th start too (they starved: the scan always began
    # at the first group, and saturated groups with jobs waiting filled it).
    from errands.backends.flow import MAX_GROUPS

    q = clocked_queue

    @q.task(limit=errands.Limit("per-user", rate=(1, 3600), group="user"))
    def notify(user: str) -> None: ...

    groups = MAX_GROUPS + 100
    q.enqueue_many([("notify", {"user": f"u{i:05d}"}) for i in range(groups) for _ in range(2)])
    q.backend.register_limits([notify.options.limit.spec()], q.clock())  # type: ignore[union-attr]
    request = ClaimRequest("w", ["notify"], None, 250, 60.0, True)
    started: set[str] = set()
    for _ in range(2 * groups // 250):
        got = q.backend.claim(request, q.clock())
        started |= {q.get(j.id).limit_group for j in got}  # type: ignore[misc,union-attr]
    assert len(started) == groups, f"{groups - len(started)} groups never started"
    assert q.backend.claim(request, q.clock()) == []  # and each only once in its window


def test_a_claim_whose_clock_is_behind_still_counts_every_start_of_its_window(
    clocked_queue: errands.Queue, clock: FixedClock
) -> None:
    # A claim's ``now`` is read before it waits for the write lock (or on another host): a
    # later claim's trimming must not drop starts an earlier-clocked claim still counts.
    q = clocked_queue
    t = app(q)
    t0 = q.clock()
    t["r"].enqueue(n=0)
    t["r"].enqueue(n=1)
    assert len(claim(q)) == 2  # starts at t0
    clock.now = t0 + 9.0
    for n in range(2, 6):
        t["r"].enqueue(n=n)
    clock.now = t0 + 10.5
    assert len(claim(q, n=1)) == 1  # the window (t0 + 0.5, …] holds none of t0's
    clock.now = t0 + 9.9  # a claim whose clock is behind: its window holds t0's two
    assert claim(q) == []


# -- snooze and progress (a real worker) -----------------------------------------------------


def test_snooze_requeues_later_without_using_up_an_attempt(queue: errands.Queue) -> None:
    calls: list[int] = []

    @queue.task(max_attempts=1)
    def poll(ctx: JobContext) -> str:
        calls.append(ctx.attempt)
        if len(calls) < 3:
            raise errands.Snooze(0)
        return "done"

    job_id = queue.enqueue("poll", {})
    queue.run_worker(burst=True, concurrency=1)
    job = queue.get(job_id)
    assert job is not None and job.status == "succeeded" and job.result == "done"
    assert calls == [1, 2, 3] and job.max_attempts == 3
    assert [a.status for a in queue.attempts(job_id)] == ["snoozed", "snoozed", "succeeded"]
    snoozed = [e for e in queue.events(job_id) if e.event == "SNOOZED"]
    assert len(snoozed) == 2 and snoozed[0].detail == {"attempt": 1, "delay": 0.0}


def test_a_rate_limited_job_that_cannot_start_within_its_lease_is_handed_back(
    make_queue: Callable[..., errands.Queue],
) -> None:
    # Its claim counted it in the rate's window as starting within the lease at the latest:
    # a job still waiting for a runner by then is handed back unstarted (no attempt used) and
    # claimed again, so it never starts outside what the window counted.
    q = make_queue(lease_seconds=1.0, heartbeat_seconds=0.25)
    began: dict[str, float] = {}

    @q.task(priority=9)
    def slow() -> None:
        began["slow"] = time.time()
        time.sleep(1.6)

    @q.task(limit=errands.Limit("mail", rate=(10, 1)))
    def mail() -> None:
        began.setdefault("mail", time.time())

    q.enqueue("slow", {})
    job_id = q.enqueue("mail", {})
    summary = q.run_worker(burst=True, concurrency=1)  # holds both: mail waits behind slow
    job = q.get(job_id)
    assert job is not None and job.status == "succeeded" and job.attempts == 1
    assert [a.status for a in q.attempts(job_id)] == ["succeeded"]
    assert summary.claimed == 3  # slow, mail, and mail again once handed back
    (attempt,) = q.attempts(job_id)
    assert attempt.started_at is not None
    assert attempt.started_at.timestamp() <= began["mail"]  # the handler's own start


def test_a_long_rate_limited_handler_frees_its_window_while_it_runs(
    make_queue: Callable[..., errands.Queue],
) -> None:
    # Until its real start is written, a claimed rate-limited job counts as starting a lease
    # after its claim; the worker writes the starts of running ones with its heartbeat, so a
    # handler longer than its window does not hold the next start back until it ends.
    q = make_queue(lease_seconds=3.0, heartbeat_seconds=0.25, poll_interval=0.05)
    second_started = threading.Event()
    seen: list[bool] = []

    @q.task(limit=errands.Limit("one-a-second", rate=(1, 1)))
    def step(n: int) -> None:
        if n == 0:
            seen.append(second_started.wait(3.5))  # the next start comes while this runs
        else:
            second_started.set()

    q.enqueue("step", {"n": 0})
    q.enqueue("step", {"n": 1})
    q.run_worker(burst=True, concurrency=2)
    assert seen == [True]


def test_snooze_moves_run_at(queue: errands.Queue) -> None:
    @queue.task
    def later() -> None:
        raise errands.Snooze(3600)

    job_id = queue.enqueue("later", {})
    before = time.time()
    queue.run_worker(burst=True, concurrency=1)
    job = queue.get(job_id)
    assert job is not None and job.status == "queued" and job.attempts == 1
    assert job.run_at is not None and job.run_at.timestamp() >= before + 3600
    with pytest.raises(ValueError, match="Snooze takes seconds"):
        errands.Snooze(-1)


def test_progress_is_stored_on_the_job_without_events(queue: errands.Queue) -> None:
    @queue.task
    def work(ctx: JobContext) -> None:
        for i in range(50):
            ctx.progress(i / 100, f"row {i}")
        ctx.progress(0.5, "half")
        with pytest.raises(ValueError, match="fraction"):
            ctx.progress(1.5)

    job_id = queue.enqueue("work", {})
    queue.run_worker(burst=True, concurrency=1)
    job = queue.get(job_id)
    assert job is not None and job.status == "succeeded"
    # The first call wrote at once; the 50 later ones within a second were coalesced, and
    # the latest was written before the outcome.
    assert job.progress == 0.5 and job.progress_message == "half"
    assert job.progress_at is not None
    assert {e.event for e in queue.events(job_id)} <= {"ENQUEUED", "CLAIMED", "SUCCEEDED"}
    assert queue.get(job_id).to_dict()["progress"] == 0.5  # type: ignore[union-attr]


def test_the_limit_is_stored_on_the_job(queue: errands.Queue, db_url: str) -> None:
    t = app(queue)
    t["b"].enqueue(tenant="acme")
    job = queue.get(1)
    assert job is not None and (job.limit_key, job.limit_group) == ("t", "acme")
    assert job.to_dict()["limit_key"] == "t"
    if is_sqlite(db_url):  # the partial index the claim counts from exists
        conn = sqlite3.connect(db_url.removeprefix("sqlite:///"))
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='index'")}
        conn.close()
        assert {"jobs_limited_due", "jobs_limited_running"} <= names


@pytest.mark.parametrize("after", [None, ("k", "g")], ids=["first", "resumed"])
def test_the_claim_probes_each_waiting_group_through_the_index(
    sqlite_path: str, after: tuple[str, str] | None
) -> None:
    # No head-of-line blocking by construction: the groups' skip scan ranges on (key, group)
    # and on key, so 10,000 jobs behind a saturated key are never read (a row-value
    # comparison made SQLite range on the key alone: 5 ms a claim instead of 15 us) — from the
    # first group, or resumed where the previous claim stopped.
    from errands.backends import sql

    errands.Queue(sqlite_path).close()
    key, grp = after or (None, None)
    params = {"max_groups": 9, "after_key": key, "after_grp": grp}
    conn = sqlite3.connect(sqlite_path)
    try:
        query = sql.queries("sqlite")["limited_groups"]
        plan = " | ".join(r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + query, params))
    finally:
        conn.close()
    assert "jobs_limited_due (limit_key=? AND limit_group>?)" in plan, plan
    assert "SCAN jobs" not in plan, plan
