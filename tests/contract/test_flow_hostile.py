"""Flow control under hostile input, both backends (docs/flow-control.md): limit groups no
backend stores, bad progress, snoozes without end, caps no column holds. Each refusal is one
line at the call that made the value, and nothing stored can stop other jobs' claims.
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Callable
from typing import Any

import pytest

import errands
from errands.backends.base import ClaimedJob, ClaimRequest, NewJob
from helpers.support import get_job


def claim(q: errands.Queue, types: list[str], n: int = 100) -> list[ClaimedJob]:
    limits = [t.options.limit.spec() for t in q.tasks.values() if t.options.limit]
    q.backend.register_limits(list({s.key: s for s in limits}.values()), q.clock())
    return q.backend.claim(ClaimRequest("w1", types, None, n, 60.0, True), q.clock())


# -- 1. limit groups: the text rule at enqueue; nothing stored stops a claim ---------------


@pytest.mark.parametrize(
    "bad, rule",
    [("t\udcff", "lone surrogate"), ("nul\x00", "NUL"), ("g" * 1025, "at most 1024")],
    ids=["surrogate", "nul", "long"],
)
def test_a_group_no_backend_stores_is_refused_at_enqueue(
    queue: errands.Queue, bad: str, rule: str
) -> None:
    @queue.task(limit=errands.Limit("k", running=1, group=lambda p: bad))
    def by_callable(n: int = 0) -> None: ...

    @queue.task(limit=errands.Limit("f", running=1, group="tenant"))
    def by_field(tenant: Any = None) -> None: ...

    calls: list[Callable[[], object]] = [
        lambda: by_callable.enqueue(n=1),
        lambda: queue.enqueue_many([("by_callable", {})]),
    ]
    if rule.startswith("at most"):  # the payload rule already refuses a NUL or a surrogate
        calls += [
            lambda: by_field.enqueue(tenant=bad),
            lambda: queue.enqueue_many([("by_field", {"tenant": bad})]),
        ]
    for call in calls:
        with pytest.raises(errands.ConfigurationError, match=f"limit '.' group .*{rule}") as e:
            call()
        assert "\n" not in str(e.value)
    assert queue.jobs() == []
    by_field.enqueue(tenant="g" * 1024)  # the bound itself is accepted
    assert [j.limit_group for j in queue.jobs()] == ["g" * 1024]


def test_a_group_an_older_errands_stored_never_stops_a_claim(queue: errands.Queue) -> None:
    @queue.task(limit=errands.Limit("t", running=1, group="tenant"))
    def tenant_job(tenant: Any = None) -> None: ...

    @queue.task
    def free() -> None: ...

    free.enqueue()
    tenant_job.enqueue(tenant="ok")
    # What an errands without the rule wrote on SQLite: its JSON functions stored the lone
    # surrogate as the bytes ED B3 BF, which are not UTF-8 (written here with plain SQL, as
    # the insert now binds the group and the driver refuses such text). PostgreSQL never
    # stored one.
    if queue.backend.dialect == "postgres":
        expected = ["free", "tenant_job"]
    else:
        old = NewJob("tenant_job", "{}", "default", 0, queue.clock(), 3)
        old.limit_key, old.limit_group = "t", "placeholder"
        (old_id,) = queue.backend.enqueue([old], queue.clock(), actor="api")
        with sqlite3.connect(queue.url) as conn:
            conn.execute(
                "UPDATE jobs SET limit_group = CAST(X'74EDB3BF' AS TEXT) WHERE id = ?", (old_id,)
            )
        expected = ["free", "tenant_job", "tenant_job"]
    claimed = claim(queue, ["free", "tenant_job"])
    assert sorted(j.type for j in claimed) == expected
    groups = {g for info in queue.limits() for g in info.groups}
    assert groups <= {"ok", "t\ufffd\ufffd\ufffd"}
    assert {j.limit_group for j in queue.jobs()} <= {None, "", "ok", "t\ufffd\ufffd\ufffd"}


# -- 4. snooze: delay=' rule, and max_snoozes ends a loop ----------------------------------


@pytest.mark.parametrize("seconds", [1e12, 1e300, 10**400, -1, math.nan, math.inf, True, "5"])
def test_a_snooze_no_backend_stores_is_refused_where_it_is_raised(seconds: Any) -> None:
    with pytest.raises(ValueError, match=r"Snooze takes seconds >= 0 and at most 31536000000"):
        errands.Snooze(seconds)
    assert errands.Snooze(31_536_000_000).seconds == 31_536_000_000.0  # the bound itself


def test_a_handler_snoozing_for_ever_fails_the_job_but_the_queue_reads_on(
    queue: errands.Queue,
) -> None:
    @queue.task(max_attempts=1)
    def far() -> None:
        raise errands.Snooze(1e12)  # year 33715: refused where it is raised, on both backends

    job_id = queue.enqueue("far", {})
    queue.run_worker(burst=True, concurrency=1)
    job = get_job(queue, job_id)
    assert (job.status, job.error_code) == ("failed", "INTERNAL:ValueError")
    assert "at most 31536000000" in (job.error_detail or "")
    assert [j.id for j in queue.jobs()] == [job_id]  # every listing still reads


def test_max_snoozes_ends_a_snooze_loop_with_its_own_code(queue: errands.Queue) -> None:
    @queue.task(max_snoozes=3)
    def poll() -> None:
        raise errands.Snooze(0)

    job_id = queue.enqueue("poll", {})
    queue.run_worker(burst=True, concurrency=1)
    job = get_job(queue, job_id)
    assert (job.status, job.error_code, job.attempts) == ("failed", "SNOOZE:LIMIT", 4)
    assert "past max_snoozes=3" in (job.error_detail or "")
    assert [a.status for a in queue.attempts(job_id)] == ["snoozed"] * 3 + ["failed"]
    with pytest.raises(errands.ConfigurationError, match="max_snoozes must be between 0"):
        queue.task(max_snoozes=-1)


def test_the_default_max_snoozes_ends_the_docs_own_snooze_zero_loop(queue: errands.Queue) -> None:
    calls: list[int] = []

    @queue.task
    def poll(ctx: errands.JobContext) -> str:
        calls.append(ctx.attempt)
        if len(calls) > 1100:  # a queue without the bound would loop here for ever
            return "escaped"
        raise errands.Snooze(0)

    job_id = queue.enqueue("poll", {})
    queue.run_worker(burst=True, concurrency=1)
    job = get_job(queue, job_id)
    assert (job.status, job.error_code) == ("failed", "SNOOZE:LIMIT")
    assert len(calls) == 1001 and job.attempts == 1001


# -- 5. caps a column holds: running, a rate's count and period all 0..1,000,000 -----------


@pytest.mark.parametrize(
    "rate", [(2**63, 1), (10**12, 1), (1_000_001, 1), (10, 1_000_001), (10, 1e300), (0, 1)]
)
def test_a_rate_no_column_holds_is_refused_by_limit_and_set_limit(
    queue: errands.Queue, rate: tuple[int, float]
) -> None:
    rule = r"rate must be \(n, seconds\) with n from 1 to 1,000,000 and seconds over 0 and at most"
    with pytest.raises(errands.ConfigurationError, match=rule):
        errands.Limit("v", rate=rate)
    with pytest.raises(errands.ConfigurationError, match=rule):
        queue.set_limit("v", rate=rate)
    assert queue.limits() == []  # nothing was stored


def test_the_largest_caps_are_stored_and_read_back(queue: errands.Queue) -> None:
    queue.set_limit("v", running=1_000_000, rate=(1_000_000, 1_000_000))
    (info,) = queue.limits()
    assert (info.running, info.rate) == (1_000_000, (1_000_000, 1_000_000.0))
    with pytest.raises(errands.ConfigurationError, match="between 0 and 1000000"):
        queue.set_limit("v", running=10**12)


# -- 8. a misspelt payload key: both names in the one error --------------------------------


def test_a_misspelt_key_names_the_missing_and_the_unexpected_argument(
    queue: errands.Queue,
) -> None:
    @queue.task
    def send_welcome(user_id: int, lang: str = "en") -> None: ...

    with pytest.raises(errands.PayloadError) as e:
        send_welcome.enqueue(userid=1)
    assert "missing 'user_id'; unexpected 'userid' (did you mean 'user_id'?)" in str(e.value)
    with pytest.raises(errands.PayloadError, match=r"unexpected 'x'$"):
        send_welcome.enqueue(user_id=1, x=2)
    assert queue.jobs() == []
