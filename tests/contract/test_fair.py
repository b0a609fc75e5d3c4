"""Fair share in one process, both backends (docs/flow-control.md, "Fair share"): the turns
the claim takes among the values of a fair task, by weight, with priority first, a capped
value passed over, no credit banked while a value waits, and the turns kept in the database.
The cross-process promises are tests/runtime/test_fair_runtime.py.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

import errands
from errands.backends.base import ClaimedJob, ClaimRequest, Succeeded
from helpers.support import FixedClock

TYPES = ["work", "capped", "plain"]
NOT_TEXT: Any = {1: 2}  # a weight keyed by a number, not its text


def app(q: errands.Queue) -> dict[str, Any]:
    """``work``: fair by tenant, gold weighs 3; ``capped``: fair by tenant and one running per
    tenant; ``plain``: neither."""

    @q.task(fair=errands.Fair("tenant", weights={"gold": 3}))
    def work(tenant: str = "", n: int = 0) -> None: ...

    @q.task(fair="tenant", limit=errands.Limit("per-tenant", running=1, group="tenant"))
    def capped(tenant: str = "", n: int = 0) -> None: ...

    @q.task
    def plain(n: int = 0) -> None: ...

    return {"work": work, "capped": capped, "plain": plain}


def claim(q: errands.Queue, n: int = 1) -> list[ClaimedJob]:
    """Claim as a worker running every task of ``app`` does."""
    specs = [t.options.limit.spec() for t in q.tasks.values() if t.options.limit]
    q.backend.register_limits(specs, q.clock())
    fair = {
        key: t.options.fair.spec()
        for t in q.tasks.values()
        if t.options.fair is not None and (key := t.options.fair_key()) is not None
    }
    request = ClaimRequest("w1", TYPES, None, n, 60.0, True, fair)
    return q.backend.claim(request, q.clock())


def tenants(jobs: list[ClaimedJob]) -> str:
    return "".join(json.loads(j.payload).get("tenant", "-")[:1] or "-" for j in jobs)


def claims(q: errands.Queue, times: int, n: int = 1) -> str:
    out = ""
    for _ in range(times):
        out += tenants(claim(q, n))
    return out


def backlog(q: errands.Queue, task: str, tenant: str, count: int) -> None:
    q.enqueue_many([(task, {"tenant": tenant, "n": i}) for i in range(count)])


def test_a_tenant_enqueued_after_a_backlog_takes_turns_with_it(
    clocked_queue: errands.Queue,
) -> None:
    q = clocked_queue
    app(q)
    backlog(q, "work", "A", 200)
    backlog(q, "work", "B", 10)
    # Without fair share the claim takes run_at then id order: all of A first.
    assert claims(q, 20) == "AB" * 10
    assert claims(q, 5) == "AAAAA"  # B is done: A alone gets every start


def test_weights_give_starts_in_their_ratio(clocked_queue: errands.Queue) -> None:
    q = clocked_queue
    app(q)
    backlog(q, "work", "A", 300)
    backlog(q, "work", "gold", 300)
    got = Counter(claims(q, 20, n=10))
    assert got["g"] + got["A"] == 200
    assert abs(got["g"] - 3 * got["A"]) <= 4  # 150:50, within one turn of each


def test_a_value_alone_gets_every_start_asked_for(clocked_queue: errands.Queue) -> None:
    q = clocked_queue
    app(q)
    backlog(q, "work", "A", 50)
    assert claims(q, 1, n=20) == "A" * 20


def test_a_value_that_waited_banks_no_credit(
    clocked_queue: errands.Queue, clock: FixedClock
) -> None:
    q = clocked_queue
    app(q)
    backlog(q, "work", "A", 100)
    assert claims(q, 40) == "A" * 40  # B is not due yet: A alone, for 40 starts
    backlog(q, "work", "B", 50)
    # B comes back level with A, not 40 starts ahead: it alternates from now on.
    assert claims(q, 10) in ("AB" * 5, "BA" * 5)


def test_a_later_due_value_starts_within_one_turn_of_each_competitor(
    clocked_queue: errands.Queue,
) -> None:
    q = clocked_queue
    app(q)
    for t in "ACDE":
        backlog(q, "work", t, 50)
    assert len(claims(q, 40)) == 40
    backlog(q, "work", "B", 5)
    assert "B" in claims(q, 5)  # four competitors: B's first start within five


def test_priority_still_comes_first(clocked_queue: errands.Queue) -> None:
    q = clocked_queue
    t = app(q)
    backlog(q, "work", "A", 10)
    backlog(q, "work", "B", 10)
    assert claims(q, 2) in ("AB", "BA")
    t["work"].with_options(priority=5).enqueue(tenant="B", n=99)
    (job,) = claim(q)
    assert job.priority == 5


def test_a_capped_value_is_passed_over_never_waited_for(clocked_queue: errands.Queue) -> None:
    q = clocked_queue
    app(q)
    backlog(q, "capped", "A", 10)
    backlog(q, "capped", "B", 10)
    first = claim(q, n=10)
    assert sorted(tenants(first)) == ["A", "B"]  # one running per tenant
    assert claim(q) == []  # both capped
    now = q.clock()
    done = [j for j in first if json.loads(j.payload)["tenant"] == "A"]
    q.backend.finish([Succeeded(done[0].id, done[0].attempt, now, None)], "w1", now, held=done)
    assert tenants(claim(q, n=10)) == "A"  # B still capped: A's turn is not blocked by it


def test_fair_jobs_share_the_claim_with_plain_ones(clocked_queue: errands.Queue) -> None:
    q = clocked_queue
    t = app(q)
    backlog(q, "work", "A", 5)
    t["plain"].enqueue(n=1)
    got = claim(q, n=10)
    assert sorted(j.type for j in got) == ["plain"] + ["work"] * 5


def test_the_turns_are_stored_so_a_new_worker_continues_them(
    db_url: str, clock: FixedClock
) -> None:
    with errands.Queue(db_url, clock=clock) as q1:
        app(q1)
        backlog(q1, "work", "A", 20)
        backlog(q1, "work", "B", 20)
        assert claims(q1, 3) == "ABA"
    with errands.Queue(db_url, clock=clock) as q2:  # another process: B's turn is next
        app(q2)
        assert claims(q2, 3) == "BAB"


@pytest.mark.parametrize(
    ("build", "words"),
    [
        (lambda: {"fair": errands.Fair("t", weights={"x": 0})}, "over 0"),
        (lambda: {"fair": errands.Fair("t", weights=NOT_TEXT)}, "as a string"),
        (lambda: {"fair": errands.Fair("t", default_weight=-1)}, "default_weight"),
        (lambda: {"fair": 42}, "field name"),
        (lambda: {"fair": "t", "limit": errands.Limit("k", running=1, group="u")}, "group='t'"),
    ],
)
def test_bad_fair_options_are_refused_with_what_to_do(
    q: errands.Queue, build: Callable[[], dict[str, Any]], words: str
) -> None:
    with pytest.raises(errands.ConfigurationError, match=words):
        q.task(**build())(lambda: None)


def test_an_operator_limit_on_the_fair_key_caps_each_value(clocked_queue: errands.Queue) -> None:
    q = clocked_queue
    app(q)
    backlog(q, "work", "A", 5)
    backlog(q, "work", "B", 5)
    q.set_limit("fair:tenant", running=1)  # `errands limit set fair:tenant --running 1`
    assert sorted(tenants(claim(q, n=10))) == ["A", "B"]
    assert claim(q, n=10) == []
    q.clear_limit("fair:tenant")
    assert len(claim(q, n=10)) == 8


def test_the_fair_claim_never_starts_an_expired_job(
    clocked_queue: errands.Queue, clock: FixedClock
) -> None:
    """The fair probe passes over an expired job as the other claims do; the expiry service
    ends it (tests/client/test_expiry.py)."""
    q = clocked_queue
    t = app(q)
    late = t["work"].with_options(expires_in=60).enqueue(tenant="A", n=1)
    timely = t["work"].with_options(expires_in=600).enqueue(tenant="B", n=2)
    clock.advance(120)  # A's window is over, B's is not
    assert [j.id for j in claim(q, n=10)] == [timely]
    job = q.backend.get_job(late)
    assert job is not None and job.status == "queued"  # until the service ends it


def test_turns_a_value_cannot_use_go_to_the_others_in_the_same_claim(
    clocked_queue: errands.Queue,
) -> None:
    """Work-conserving within one claim: the claim asks each value for the turns its tag
    gives, and when one has fewer due jobs than that, the others take the rest."""
    q = clocked_queue
    app(q)
    backlog(q, "work", "A", 1)
    backlog(q, "work", "B", 50)
    got = claim(q, n=10)
    assert len(got) == 10
    assert sorted(tenants(got)) == ["A"] + ["B"] * 9
