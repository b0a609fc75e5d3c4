"""The worker's backend verbs: claim order and fields, complete/fail, and fencing."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime

import errands
from errands.backends.base import ClaimRequest, Failed, Retried, Succeeded
from helpers.support import FixedClock, claim, event_names, get_job


def test_claim_returns_the_first_job_and_sets_running(
    clocked_queue: errands.Queue, clock: FixedClock
) -> None:
    ids = [clocked_queue.enqueue("t", {"n": n}) for n in range(5)]

    (job,) = claim(clocked_queue, ["t"], worker_id="w1", lease_seconds=30)

    assert (job.id, job.attempt, job.type, job.queue) == (ids[0], 1, "t", "default")
    assert json.loads(job.payload) == {"n": 0}
    row = clocked_queue.get(ids[0])
    assert row is not None
    assert (row.status, row.attempts, row.worker_id) == ("running", 1, "w1")
    assert row.started_at == datetime.fromtimestamp(clock.now, UTC)
    assert row.lease_expires_at == datetime.fromtimestamp(clock.now + 30, UTC)
    (attempt,) = clocked_queue.attempts(ids[0])
    assert (attempt.attempt, attempt.status, attempt.worker_id) == (1, "running", "w1")
    assert event_names(clocked_queue, ids[0]) == ["ENQUEUED", "CLAIMED"]
    assert [j.status for j in clocked_queue.jobs()].count("queued") == 4


def test_a_claim_records_its_claimed_events_with_the_attempt(
    clocked_queue: errands.Queue, clock: FixedClock
) -> None:
    ids = [clocked_queue.enqueue("t", {}) for _ in range(3)]
    claim(clocked_queue, ["t"], worker_id="w9", limit=3)
    for job_id in ids:
        claimed = [e for e in clocked_queue.events(job_id) if e.event == "CLAIMED"]
        assert [(e.actor, e.detail) for e in claimed] == [("w9", {"attempt": 1})]
        assert claimed[0].ts == datetime.fromtimestamp(clock.now, UTC)


def test_enqueue_and_claim_honour_an_audit_without_their_events(
    make_queue: Callable[..., errands.Queue],
) -> None:
    q = make_queue(audit=["ENQUEUED", "SUCCEEDED"])
    job_id = q.enqueue("t", {})
    (job,) = claim(q, ["t"], worker_id="w1")
    assert event_names(q, job_id) == ["ENQUEUED"]  # no CLAIMED, as configured
    q = make_queue(audit=["SUCCEEDED"])
    other = q.enqueue("t", {})
    claim(q, ["t"], worker_id="w2")
    assert event_names(q, other) == []  # neither ENQUEUED nor CLAIMED
    (attempt,) = q.attempts(job_id)  # the attempt row is written all the same
    assert (attempt.attempt, attempt.status, attempt.worker_id) == (1, "running", "w1")
    assert job.attempt == 1


def test_a_second_claim_returns_the_second_job(clocked_queue: errands.Queue) -> None:
    ids = [clocked_queue.enqueue("t", {"n": n}) for n in range(5)]
    assert [j.id for j in claim(clocked_queue, ["t"])] == [ids[0]]
    assert [j.id for j in claim(clocked_queue, ["t"], worker_id="w2")] == [ids[1]]
    running = clocked_queue.jobs(status="running")
    assert {(j.id, j.worker_id) for j in running} == {(ids[0], "w1"), (ids[1], "w2")}


def test_claim_takes_a_batch_up_to_the_limit(clocked_queue: errands.Queue) -> None:
    ids = [clocked_queue.enqueue("t", {}) for _ in range(5)]
    assert [j.id for j in claim(clocked_queue, ["t"], limit=3)] == ids[:3]
    assert [j.id for j in claim(clocked_queue, ["t"], limit=3)] == ids[3:]
    assert claim(clocked_queue, ["t"], limit=3) == []


def test_complete_gives_succeeded_with_result_and_one_attempt(
    clocked_queue: errands.Queue, clock: FixedClock
) -> None:
    job_id = clocked_queue.enqueue("t", {})
    (job,) = claim(clocked_queue, ["t"])
    clock.advance(2)

    applied = clocked_queue.backend.finish(
        [Succeeded(job_id, job.attempt, clock.now - 1, '{"sent":true}')], "w1", clock.now
    )

    assert applied == [True]
    row = clocked_queue.get(job_id)
    assert row is not None
    assert (row.status, row.attempts, row.result, row.error_code) == (
        "succeeded",
        1,
        {"sent": True},
        None,
    )
    assert row.finished_at == datetime.fromtimestamp(clock.now, UTC)
    (attempt,) = clocked_queue.attempts(job_id)
    assert (attempt.status, attempt.finished_at) == ("succeeded", row.finished_at)
    assert event_names(clocked_queue, job_id) == ["ENQUEUED", "CLAIMED", "SUCCEEDED"]


def test_final_failure_gives_failed_with_code_and_one_attempt(
    clocked_queue: errands.Queue, clock: FixedClock
) -> None:
    job_id = clocked_queue.enqueue("t", {})
    claim(clocked_queue, ["t"])

    applied = clocked_queue.backend.finish(
        [Failed(job_id, 1, clock.now, "INTERNAL:ValueError", "ValueError: boom", "tb")],
        "w1",
        clock.now,
    )

    assert applied == [True]
    row = clocked_queue.get(job_id)
    assert row is not None
    assert (row.status, row.attempts, row.error_code, row.error_detail) == (
        "failed",
        1,
        "INTERNAL:ValueError",
        "ValueError: boom",
    )
    (attempt,) = clocked_queue.attempts(job_id)
    assert (attempt.status, attempt.error_code) == ("failed", "INTERNAL:ValueError")
    assert clocked_queue.traceback(attempt) == "tb"
    assert event_names(clocked_queue, job_id) == ["ENQUEUED", "CLAIMED", "FAILED"]


def test_failure_with_a_retry_goes_back_to_queued_and_counts_attempts(
    clocked_queue: errands.Queue, clock: FixedClock
) -> None:
    job_id = clocked_queue.enqueue("t", {})
    claim(clocked_queue, ["t"])
    retry_at = clock.now + 10
    clocked_queue.backend.finish(
        [Retried(job_id, 1, clock.now, "X:Y", "d", None, retry_at, 10.0)], "w1", clock.now
    )

    row = clocked_queue.get(job_id)
    assert row is not None
    assert (row.status, row.attempts, row.error_code) == ("queued", 1, "X:Y")
    assert row.run_at == datetime.fromtimestamp(retry_at, UTC)
    assert claim(clocked_queue, ["t"]) == []
    clock.advance(10)
    (again,) = claim(clocked_queue, ["t"])
    assert again.attempt == 2
    assert [a.attempt for a in clocked_queue.attempts(job_id)] == [1, 2]


def test_finish_groups_several_outcomes_in_one_call(
    clocked_queue: errands.Queue, clock: FixedClock
) -> None:
    a, b = clocked_queue.enqueue("t", {}), clocked_queue.enqueue("t", {})
    claim(clocked_queue, ["t"], limit=2)
    applied = clocked_queue.backend.finish(
        [Succeeded(a, 1, clock.now, None), Failed(b, 1, clock.now, "X:Y", "d", None)],
        "w1",
        clock.now,
    )
    assert applied == [True, True]
    assert [get_job(clocked_queue, i).status for i in (a, b)] == ["succeeded", "failed"]


# -- order -----------------------------------------------------------------------------------


def test_claim_order_is_priority_then_run_at_then_id(
    clocked_queue: errands.Queue, clock: FixedClock
) -> None:
    now = clock.now
    low_old = clocked_queue.enqueue("t", {}, priority=0, run_at=now - 100)
    high_late = clocked_queue.enqueue("t", {}, priority=10, run_at=now - 1)
    high_early = clocked_queue.enqueue("t", {}, priority=10, run_at=now - 50)
    mid_a = clocked_queue.enqueue("t", {}, priority=5, run_at=now - 10)
    mid_b = clocked_queue.enqueue("t", {}, priority=5, run_at=now - 10)
    negative = clocked_queue.enqueue("t", {}, priority=-5, run_at=now - 1000)
    expected = [high_early, high_late, mid_a, mid_b, low_old, negative]

    one_by_one = [claim(clocked_queue, ["t"])[0].id for _ in expected]
    assert one_by_one == expected


def test_a_batch_claim_takes_the_highest_priority_jobs(
    clocked_queue: errands.Queue,
) -> None:
    low = [clocked_queue.enqueue("t", {}) for _ in range(3)]
    high = [clocked_queue.enqueue("t", {}, priority=1) for _ in range(3)]
    assert [j.id for j in claim(clocked_queue, ["t"], limit=3)] == high
    assert [j.id for j in claim(clocked_queue, ["t"], limit=3)] == low


def test_claim_only_takes_the_requested_types_and_queues(clocked_queue: errands.Queue) -> None:
    other_type = clocked_queue.enqueue("other", {})
    other_queue = clocked_queue.enqueue("t", {}, queue="slow")
    mine = clocked_queue.enqueue("t", {}, queue="fast")

    got = claim(clocked_queue, ["t"], queues=["fast"], limit=10)
    assert [j.id for j in got] == [mine]
    assert [j.id for j in claim(clocked_queue, ["t"], limit=10)] == [other_queue]
    assert claim(clocked_queue, ["t"], limit=10) == []
    assert get_job(clocked_queue, other_type).status == "queued"


# -- fencing -------------------------------------------------------------------------------


def _stale_attempt(q: errands.Queue, clock: FixedClock) -> int:
    """Claim a job, let its lease expire and rescue it, claim it again: attempt 1 is stale."""
    job_id = q.enqueue("t", {}, max_attempts=5)
    (first,) = claim(q, ["t"], worker_id="old", lease_seconds=30)
    assert first.attempt == 1
    clock.advance(31)
    report = q.backend.rescue(clock.now)
    assert report.recovered == [job_id]
    (second,) = claim(q, ["t"], worker_id="new", lease_seconds=30)
    assert (second.id, second.attempt) == (job_id, 2)
    return job_id


def test_fenced_completion_refuses_a_stale_attempt(
    clocked_queue: errands.Queue, clock: FixedClock
) -> None:
    job_id = _stale_attempt(clocked_queue, clock)
    before = (clocked_queue.get(job_id), clocked_queue.attempts(job_id))
    events_before = event_names(clocked_queue, job_id)

    applied = clocked_queue.backend.finish(
        [Succeeded(job_id, 1, clock.now, '"stale"')], "old", clock.now + 1
    )

    assert applied == [False]
    assert (clocked_queue.get(job_id), clocked_queue.attempts(job_id)) == before
    assert event_names(clocked_queue, job_id) == events_before
    assert events_before == ["ENQUEUED", "CLAIMED", "RECOVERED", "CLAIMED"]
    job = clocked_queue.get(job_id)
    assert job is not None and (job.status, job.attempts, job.worker_id) == ("running", 2, "new")
    assert [a.status for a in clocked_queue.attempts(job_id)] == ["lost", "running"]


def test_fenced_failure_refuses_a_stale_attempt(
    clocked_queue: errands.Queue, clock: FixedClock
) -> None:
    job_id = _stale_attempt(clocked_queue, clock)
    stale = Failed(job_id, 1, clock.now, "X:Y", "stale", "tb")
    assert clocked_queue.backend.finish([stale], "old", clock.now) == [False]
    job = clocked_queue.get(job_id)
    assert job is not None and (job.status, job.error_code) == ("running", "LOST:LEASE_EXPIRED")


def test_the_current_attempt_still_completes_after_a_stale_one_was_refused(
    clocked_queue: errands.Queue, clock: FixedClock
) -> None:
    job_id = _stale_attempt(clocked_queue, clock)
    applied = clocked_queue.backend.finish(
        [Succeeded(job_id, 1, clock.now, '"stale"'), Succeeded(job_id, 2, clock.now, '"fresh"')],
        "new",
        clock.now,
    )
    assert applied == [False, True]
    job = clocked_queue.get(job_id)
    assert job is not None and (job.status, job.result) == ("succeeded", "fresh")


def test_an_outcome_cannot_be_recorded_twice(
    clocked_queue: errands.Queue, clock: FixedClock
) -> None:
    job_id = clocked_queue.enqueue("t", {})
    claim(clocked_queue, ["t"])
    ok = Succeeded(job_id, 1, clock.now, '"first"')
    assert clocked_queue.backend.finish([ok], "w1", clock.now) == [True]
    assert clocked_queue.backend.finish([ok], "w1", clock.now) == [False]
    late_fail = Failed(job_id, 1, clock.now, "X:Y", "late", None)
    assert clocked_queue.backend.finish([late_fail], "w1", clock.now) == [False]
    job = clocked_queue.get(job_id)
    assert job is not None and (job.status, job.result) == ("succeeded", "first")
    assert event_names(clocked_queue, job_id).count("SUCCEEDED") == 1


def test_rescue_of_the_last_attempt_ends_failed_lost(
    clocked_queue: errands.Queue, clock: FixedClock
) -> None:
    job_id = clocked_queue.enqueue("t", {}, max_attempts=1)
    claim(clocked_queue, ["t"], lease_seconds=30)
    clock.advance(31)
    report = clocked_queue.backend.rescue(clock.now)
    assert (report.recovered, report.exhausted) == ([], [job_id])
    job = clocked_queue.get(job_id)
    assert job is not None and (job.status, job.error_code) == ("failed", "LOST:LEASE_EXPIRED")


def test_rescue_leaves_an_unexpired_lease_alone(
    clocked_queue: errands.Queue, clock: FixedClock
) -> None:
    job_id = clocked_queue.enqueue("t", {})
    claim(clocked_queue, ["t"], lease_seconds=30)
    clock.advance(29)
    report = clocked_queue.backend.rescue(clock.now)
    assert (report.recovered, report.exhausted) == ([], [])
    assert get_job(clocked_queue, job_id).status == "running"


def test_finish_and_claim_records_outcomes_and_claims_in_one_call(
    clocked_queue: errands.Queue, clock: FixedClock
) -> None:
    q = clocked_queue
    ids = [q.enqueue("t", {"n": n}) for n in range(4)]
    first, second = claim(q, ["t"], limit=2, worker_id="w1")
    clock.advance(1)
    outcomes: list[Succeeded | Retried] = [
        Succeeded(first.id, first.attempt, clock.now - 0.5, None),
        # retried at once: due now, so the claim in the same transaction takes it again
        Retried(second.id, second.attempt, clock.now - 0.5, "X:Y", "d", None, clock.now, 0.0),
        Succeeded(ids[3], 1, clock.now, None),  # never claimed: the fence refuses it
    ]
    request = ClaimRequest("w1", ["t"], None, 3, 30.0)

    applied, jobs = q.backend.finish_and_claim(outcomes, "w1", request, clock.now)

    assert applied == [True, True, False]
    # Claim order: the retry's run_at is now, after the two never-claimed jobs'.
    assert [(j.id, j.attempt) for j in jobs] == [(ids[2], 1), (ids[3], 1), (second.id, 2)]
    done = q.get(first.id)
    assert done is not None and done.status == "succeeded"
    assert event_names(q, first.id) == ["ENQUEUED", "CLAIMED", "SUCCEEDED"]
    assert event_names(q, second.id) == ["ENQUEUED", "CLAIMED", "RETRY_SCHEDULED", "CLAIMED"]
    assert [(a.attempt, a.status) for a in q.attempts(second.id)] == [
        (1, "failed"),
        (2, "running"),
    ]
    # The refused outcome changed nothing: ids[3] was then claimed for its first attempt.
    assert event_names(q, ids[3]) == ["ENQUEUED", "CLAIMED"]
