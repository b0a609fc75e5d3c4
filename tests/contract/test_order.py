"""Order per key in one process, both backends (docs/flow-control.md, "Order per key"): of
each value only its head starts — the lowest-id job not finished — in id order whatever the
priorities, a retry keeping its place, a failed head letting the next go or holding it
("block"), a stuck value never delaying another. The cross-process promise is
tests/runtime/test_order_runtime.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

import errands
from errands.backends.base import (
    ClaimedJob,
    ClaimRequest,
    Failed,
    Retried,
    Snoozed,
    Succeeded,
    Suspended,
)
from errands.maintenance.expirer import Expirer
from errands.order import order_specs
from errands.tasks import TaskOptions
from helpers.support import FixedClock

TYPES = ["sync", "strict", "fairsync", "plain"]


def app(q: errands.Queue) -> None:
    """``sync``: ordered by account; ``strict``: by key, a failed head blocking;
    ``fairsync``: fair and ordered by tenant; ``plain``: neither."""

    @q.task(order="account")
    def sync(account: str = "", n: int = 0) -> None: ...

    @q.task(order="key", order_on_failure="block")
    def strict(key: str = "", n: int = 0) -> None: ...

    @q.task(order="tenant", fair="tenant")
    def fairsync(tenant: str = "", n: int = 0) -> None: ...

    @q.task
    def plain(n: int = 0) -> None: ...


def claim(q: errands.Queue, n: int = 10) -> list[ClaimedJob]:
    """Claim as a worker running every task of ``app`` does."""
    options = [t.options for t in q.tasks.values()]
    fair = {k: o.fair.spec() for o in options if o.fair and (k := o.fair_key()) is not None}
    request = ClaimRequest("w1", TYPES, None, n, 60.0, True, fair, order_specs(options))
    return q.backend.claim(request, q.clock())


def ns(jobs: list[ClaimedJob]) -> list[int]:
    return [json.loads(j.payload)["n"] for j in jobs]


def succeed(q: errands.Queue, jobs: list[ClaimedJob]) -> None:
    now = q.clock()
    q.backend.finish([Succeeded(j.id, j.attempt, now, None) for j in jobs], "w1", now, held=jobs)


def fail(q: errands.Queue, job: ClaimedJob, retry_in: float | None = None) -> None:
    now = q.clock()
    outcome: Any
    if retry_in is None:
        outcome = Failed(job.id, job.attempt, now, "E", "boom", None)
    else:
        outcome = Retried(job.id, job.attempt, now, "E", "boom", None, now + retry_in)
    q.backend.finish([outcome], "w1", now, held=[job])


def enqueue(q: errands.Queue, task: str, account: str, count: int, **kw: Any) -> list[int]:
    field = {"fairsync": "tenant", "strict": "key"}.get(task, "account")
    return [q.enqueue(task, {field: account, "n": i}, **kw) for i in range(count)]


def test_one_job_per_value_at_a_time_in_id_order(clocked_queue: errands.Queue) -> None:
    q = clocked_queue
    app(q)
    enqueue(q, "sync", "a", 3)
    first = claim(q)
    assert ns(first) == [0]  # one head, though ten are asked for
    assert claim(q) == []  # the head runs: its value starts nothing more
    succeed(q, first)
    assert ns(claim(q)) == [1]


def test_values_run_side_by_side(clocked_queue: errands.Queue) -> None:
    q = clocked_queue
    app(q)
    enqueue(q, "sync", "a", 3)
    enqueue(q, "sync", "b", 3)
    got = claim(q)
    assert sorted(json.loads(j.payload)["account"] for j in got) == ["a", "b"]


def test_priority_and_run_at_are_ignored_within_a_value(
    clocked_queue: errands.Queue, clock: FixedClock
) -> None:
    q = clocked_queue
    app(q)
    q.enqueue("sync", {"account": "a", "n": 0}, delay=30)
    q.enqueue("sync", {"account": "a", "n": 1}, priority=100)
    assert claim(q) == []  # the head is not due: the urgent job behind it waits
    clock.advance(31)
    done = claim(q)
    assert ns(done) == [0]
    succeed(q, done)
    assert ns(claim(q)) == [1]


def test_a_retry_keeps_its_place_ahead_of_later_jobs(
    clocked_queue: errands.Queue, clock: FixedClock
) -> None:
    q = clocked_queue
    app(q)
    enqueue(q, "sync", "a", 3)
    head = claim(q)
    fail(q, head[0], retry_in=60)
    assert claim(q) == []  # its backoff blocks the value: n=1 does not overtake
    clock.advance(61)
    again = claim(q)
    assert ns(again) == [0] and again[0].attempt == 2
    succeed(q, again)
    assert ns(claim(q)) == [1]


def test_a_snoozed_sleeping_or_waiting_head_holds_its_value(
    clocked_queue: errands.Queue, clock: FixedClock
) -> None:
    q = clocked_queue
    app(q)
    enqueue(q, "sync", "a", 2)
    now = q.clock()
    (head,) = claim(q)
    q.backend.finish([Snoozed(head.id, head.attempt, now, now + 30, 30)], "w1", now, held=[head])
    assert claim(q) == []  # snoozed: queued, not due
    clock.advance(31)
    (head,) = claim(q)
    now = q.clock()
    sleep = Suspended(head.id, head.attempt, now, False, now + 30)
    q.backend.finish([sleep], "w1", now, held=[head])
    assert claim(q) == []  # ctx.sleep: queued, not due
    clock.advance(31)
    (head,) = claim(q)
    now = q.clock()
    park = Suspended(head.id, head.attempt, now, True, now + 3600)
    q.backend.finish([park], "w1", now, held=[head])
    parked = q.get(head.id)
    assert parked is not None and parked.status == "waiting"
    assert claim(q) == []  # ctx.wait_for: waiting


def test_a_head_past_its_deadline_or_expired_is_not_started(
    clocked_queue: errands.Queue, clock: FixedClock
) -> None:
    # Whether the head may start is the claim's own filter (due_job, due.sql): a head past its
    # deadline or its expires_in holds its value until the expiry service fails or drops it.
    q = clocked_queue
    app(q)
    late = q.enqueue("sync", {"account": "a", "n": 0}, deadline=1)
    q.enqueue("sync", {"account": "a", "n": 1})
    stale = q.enqueue("sync", {"account": "b", "n": 0}, expires_in=1)
    q.enqueue("sync", {"account": "b", "n": 1})
    clock.advance(2)
    assert claim(q) == []
    report = Expirer(q.backend).run_once(q.clock())
    assert (report.past_deadline, report.expired) == ([late], [stale])
    assert sorted(ns(claim(q))) == [1, 1]  # each value's next job is its head now


def test_a_head_waiting_for_its_dependencies_holds_its_value(
    clocked_queue: errands.Queue,
) -> None:
    q = clocked_queue
    app(q)
    (upstream,) = q.enqueue_many([("plain", {"n": 9})])
    waiting = q.enqueue("sync", {"account": "a", "n": 0}, after=[upstream])
    q.enqueue("sync", {"account": "a", "n": 1})
    got = claim(q)
    assert ns(got) == [9]  # the plain upstream only: n=1 waits behind the waiting head
    succeed(q, got)
    assert [j.id for j in claim(q)] == [waiting]


def test_a_failed_head_lets_the_next_go_by_default(clocked_queue: errands.Queue) -> None:
    q = clocked_queue
    app(q)
    enqueue(q, "sync", "a", 2)
    fail(q, claim(q)[0])
    assert ns(claim(q)) == [1]


def test_a_failed_head_blocks_its_value_with_block_until_retried(
    clocked_queue: errands.Queue,
) -> None:
    q = clocked_queue
    app(q)
    ids = enqueue(q, "strict", "a", 2)
    enqueue(q, "strict", "b", 1)
    first = claim(q)
    assert sorted(ns(first)) == [0, 0]
    a = next(j for j in first if j.id == ids[0])
    fail(q, a)
    succeed(q, [j for j in first if j.id != ids[0]])
    assert claim(q) == []  # a's failed head holds n=1 back; b is done
    assert q.reads.order_blocked(["order:key"], q.clock()) == [
        {"key": "order:key", "value": "a", "head_id": ids[0]}
    ]
    q.retry(ids[0])
    again = claim(q)
    assert [j.id for j in again] == [ids[0]]
    succeed(q, again)
    assert [j.id for j in claim(q)] == [ids[1]]
    assert q.reads.order_blocked(["order:key"], q.clock()) == []


def test_a_deleted_failed_head_releases_a_blocked_value(clocked_queue: errands.Queue) -> None:
    q = clocked_queue
    app(q)
    ids = enqueue(q, "strict", "a", 2)
    fail(q, claim(q)[0])
    assert claim(q) == []
    q.delete(ids[0])
    assert [j.id for j in claim(q)] == [ids[1]]


def test_cancelling_a_head_waiting_for_its_retry_releases_the_value(
    clocked_queue: errands.Queue,
) -> None:
    q = clocked_queue
    app(q)
    ids = enqueue(q, "strict", "a", 2)
    fail(q, claim(q)[0], retry_in=3600)
    assert claim(q) == []  # blocked by its head's backoff
    q.cancel(ids[0])  # a cancelled head never blocks, even with "block"
    assert [j.id for j in claim(q)] == [ids[1]]


def test_a_stuck_value_never_delays_another(clocked_queue: errands.Queue) -> None:
    q = clocked_queue
    app(q)
    stuck = enqueue(q, "strict", "stuck", 1)
    q.enqueue_many([("strict", {"key": "stuck", "n": i}) for i in range(1, 1000)])
    fail(q, claim(q)[0])
    assert q.reads.order_blocked(["order:key"], q.clock())[0]["head_id"] == stuck[0]
    enqueue(q, "strict", "free", 5)
    for n in range(5):  # each claim finds the free value's head at once
        got = claim(q)
        assert [json.loads(j.payload)["key"] for j in got] == ["free"]
        assert ns(got) == [n]
        succeed(q, got)


def test_the_head_probe_is_one_seek_however_long_the_backlog(clocked_queue: errands.Queue) -> None:
    # docs/flow-control.md, "Cost": the head of a value with a long backlog behind a running
    # head is the value's first entry in jobs_order_head (migration 20), not a read of every
    # queued job of the value (jobs_limited_due orders them by priority and run_at first).
    q = clocked_queue
    app(q)
    q.enqueue_many([("plain", {"n": i}) for i in range(2000)])  # other work, at lower ids
    (head,) = claim_one(q, enqueue(q, "sync", "stuck", 1))
    q.enqueue_many([("sync", {"account": "stuck", "n": i}) for i in range(1, 2000)])
    backend: Any = q.backend
    params = {"now": q.clock(), "types": backend._list(TYPES), "queues": None}
    params |= {"key": "order:account", "grp": "stuck"}
    sqlite = backend.dialect == "sqlite"
    with backend._write("test") as conn:
        if not sqlite:
            conn.execute("ANALYZE jobs")
        explain = "EXPLAIN QUERY PLAN " if sqlite else "EXPLAIN "
        plan = " | ".join(
            str(r[-1]) for r in conn.execute(explain + backend.q["order_head"], params)
        )
        assert conn.execute(backend.q["order_head"], params).fetchone()[0] == head.id
    assert "jobs_order_head" in plan, plan
    assert "jobs_limited_due" not in plan and "Filter: ((limit_key" not in plan, plan


def claim_one(q: errands.Queue, ids: list[int]) -> list[ClaimedJob]:
    """Claim one ``sync`` job, which must be ``ids``'s."""
    order = order_specs([t.options for t in q.tasks.values()])
    request = ClaimRequest("w1", ["sync"], None, 1, 60.0, True, {}, order)
    got = q.backend.claim(request, q.clock())
    assert [j.id for j in got] == ids
    return got


def test_fair_and_ordered_take_turns_between_values_in_order_within(
    clocked_queue: errands.Queue,
) -> None:
    q = clocked_queue
    app(q)
    enqueue(q, "fairsync", "A", 5)
    enqueue(q, "fairsync", "B", 5)
    seen: dict[str, list[int]] = {"A": [], "B": []}
    for _ in range(5):
        got = claim(q)
        assert sorted(json.loads(j.payload)["tenant"] for j in got) == ["A", "B"]
        for j in got:
            seen[json.loads(j.payload)["tenant"]].append(json.loads(j.payload)["n"])
        succeed(q, got)
    assert seen == {"A": [0, 1, 2, 3, 4], "B": [0, 1, 2, 3, 4]}


def test_an_ordered_task_under_a_limit_of_the_same_field_keeps_one_at_a_time(
    clocked_queue: errands.Queue,
) -> None:
    q = clocked_queue

    @q.task(order="account", limit=errands.Limit("acct", running=5, group="account"))
    def post(account: str = "", n: int = 0) -> None: ...

    options = [t.options for t in q.tasks.values()]
    assert order_specs(options) == {"acct": False}
    q.backend.register_limits([errands.Limit("acct", running=5, group="account").spec()], 0.0)
    q.enqueue_many([("post", {"account": "a", "n": i}) for i in range(3)])
    request = ClaimRequest("w1", ["post"], None, 10, 60.0, True, {}, order_specs(options))
    got = q.backend.claim(request, q.clock())
    assert ns(got) == [0]  # the cap allows five: the order allows one
    succeed(q, got)
    assert ns(q.backend.claim(request, q.clock())) == [1]


def test_unordered_jobs_are_claimed_beside_ordered_ones(clocked_queue: errands.Queue) -> None:
    q = clocked_queue
    app(q)
    enqueue(q, "sync", "a", 3)
    q.enqueue_many([("plain", {"n": i}) for i in range(3)])
    assert len(claim(q)) == 4


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"order": "a", "fair": "b"}, "same field"),
        ({"order": "a", "limit": errands.Limit("k", running=2, group="b")}, "group='a'"),
        ({"order": "a", "order_on_failure": "stop"}, "'continue' or 'block'"),
        ({"order_on_failure": "block"}, "without order"),
        ({"order": 42}, "payload field name"),
    ],
)
def test_combinations_that_cannot_hold_are_refused(
    clocked_queue: errands.Queue, kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(errands.ConfigurationError, match=message):
        clocked_queue.task(**kwargs)(lambda: None)


def test_tasks_sharing_a_key_must_agree_on_failure() -> None:
    from errands.order import Order

    options = [TaskOptions(order=Order("a")), TaskOptions(order=Order("a", "block"))]
    with pytest.raises(errands.ConfigurationError, match="must agree"):
        order_specs(options)
