"""The operator's job edits (issue #25): delete, run now, priority — fenced on state, audited,
refusing what they must, on both backends."""

from __future__ import annotations

import logging
import threading

import pytest

import errands
from errands.backends.base import Succeeded
from helpers.support import FixedClock, claim, event_names, get_job


def _fail_once(q: errands.Queue) -> int:
    """A job whose first attempt failed: queued again, its retry an hour away."""

    @q.task(max_attempts=3, backoff=errands.fixed(3600))
    def flaky() -> None:
        raise RuntimeError("not yet")

    job_id = flaky.enqueue()
    q.run_worker(burst=True, concurrency=1)
    return job_id


# -- run now ---------------------------------------------------------------------------------


def test_run_now_makes_a_scheduled_job_due_and_records_old_and_new(
    clocked_queue: errands.Queue, clock: FixedClock
) -> None:
    q = clocked_queue
    later = q.enqueue("t", {}, delay=3600)
    report = q.run_now(later, actor="alice")
    assert report.changed == [later] and report.refused == {}
    job = get_job(q, later)
    assert job.status == "queued" and job.run_at is not None
    assert job.run_at.timestamp() == pytest.approx(clock.now)
    event = q.events(later)[-1]
    assert (event.event, event.actor) == ("RESCHEDULED", "alice")
    assert event.detail is not None
    assert event.detail["old_run_at"].startswith("2027-01-15T09:00:00")
    assert event.detail["new_run_at"].startswith("2027-01-15T08:00:00")
    assert claim(q, ["t"])[0].id == later  # a worker takes it now


def test_run_now_takes_a_retry_waiting_out_its_backoff(
    clocked_queue: errands.Queue, clock: FixedClock
) -> None:
    job_id = _fail_once(clocked_queue)
    job = get_job(clocked_queue, job_id)
    assert job.status == "queued" and job.attempts == 1 and job.run_at is not None
    assert job.run_at.timestamp() == pytest.approx(clock.now + 3600)
    assert clocked_queue.run_now(job_id).changed == [job_id]
    assert event_names(clocked_queue, job_id)[-2:] == ["RETRY_SCHEDULED", "RESCHEDULED"]


def test_run_now_refuses_what_is_not_a_future_queued_job(
    clocked_queue: errands.Queue,
) -> None:
    q = clocked_queue
    due = q.enqueue("t", {})
    running = q.enqueue("r", {}, delay=0)
    claim(q, ["r"])
    done = q.enqueue("d", {})
    (held,) = claim(q, ["d"])
    q.backend.finish([Succeeded(held.id, held.attempt, q.clock(), None)], "w1", q.clock())
    report = q.run_now(due, running, done, 987654)
    assert report.changed == []
    assert set(report.refused) == {due, running, done, 987654}
    assert "already due" in report.refused[due]
    assert report.refused[running].startswith("running")
    assert report.refused[done].startswith("succeeded")
    assert report.refused[987654] == "no such job"
    assert event_names(q, due) == ["ENQUEUED"]


# -- priority --------------------------------------------------------------------------------


def test_set_priority_changes_queued_and_waiting_jobs_with_an_event(
    queue: errands.Queue,
) -> None:
    up = queue.enqueue("t", {})
    down = queue.enqueue("t", {}, after=[up])
    assert get_job(queue, down).status == "waiting"
    report = queue.set_priority(7, up, down, actor="bob")
    assert report.changed == [up, down]
    assert (get_job(queue, up).priority, get_job(queue, down).priority) == (7, 7)
    event = queue.events(down)[-1]
    assert (event.event, event.actor, event.detail) == (
        "PRIORITY_CHANGED",
        "bob",
        {"old_priority": 0, "new_priority": 7},
    )
    again = queue.set_priority(7, up)
    assert again.changed == [] and again.refused[up] == "already priority 7"


def test_a_higher_priority_is_claimed_first(queue: errands.Queue) -> None:
    first = queue.enqueue("t", {})
    second = queue.enqueue("t", {})
    queue.set_priority(5, second)
    assert [c.id for c in claim(queue, ["t"])] == [second]
    assert [c.id for c in claim(queue, ["t"])] == [first]


def test_set_priority_refuses_running_and_final_jobs_and_absurd_numbers(
    queue: errands.Queue,
) -> None:
    running = queue.enqueue("t", {})
    claim(queue, ["t"])
    gone = queue.enqueue("x", {})
    queue.cancel(gone)
    report = queue.set_priority(3, running, gone)
    assert report.changed == []
    assert report.refused[running].startswith("running")
    assert report.refused[gone].startswith("cancelled")
    for bad in (2**31, -(2**31) - 1, True, 1.5, "3"):
        with pytest.raises(errands.ConfigurationError, match="priority"):
            queue.set_priority(bad, running)  # type: ignore[arg-type]
    assert get_job(queue, running).priority == 0


# -- delete ----------------------------------------------------------------------------------


def test_delete_removes_jobs_in_any_state_but_running_with_their_history(
    queue: errands.Queue, caplog: pytest.LogCaptureFixture
) -> None:
    queued = queue.enqueue("t", {})
    cancelled = queue.enqueue("t", {})
    queue.cancel(cancelled)
    running = queue.enqueue("r", {})
    claim(queue, ["r"])
    failed = _fail_once(queue)  # queued again (retry later), with an attempt and events
    with caplog.at_level(logging.INFO, logger="errands"):
        report = queue.delete(queued, cancelled, failed, running, actor="carol")
    assert report.changed == [queued, cancelled, failed]
    assert "cancel it first" in report.refused[running]
    for job_id in report.changed:
        assert queue.get(job_id) is None
        assert queue.events(job_id) == [] and queue.attempts(job_id) == []
    assert get_job(queue, running).status == "running"
    logged = [r.getMessage() for r in caplog.records if "deleted" in r.getMessage()]
    assert logged == [f"jobs deleted by carol: {queued}, {cancelled}, {failed}"]


def test_delete_refuses_a_job_a_waiting_job_depends_on(queue: errands.Queue) -> None:
    up = queue.enqueue("t", {})
    other = queue.enqueue("t", {})
    down = queue.enqueue("t", {}, after=[up, other])
    queue.cancel(other)  # final now, but `down` still waits (for `up`): it needs both
    assert get_job(queue, down).status == "waiting"
    report = queue.delete(up, other)
    assert report.changed == []
    for job_id in (up, other):  # a final upstream too: its outcome decides down's
        assert f"waiting job #{down} depends on it" in report.refused[job_id]
    assert get_job(queue, other).status == "cancelled"
    # the waiting job itself can go (its edges with it); then its upstreams can
    assert queue.delete(down).changed == [down]
    assert queue.delete(up, other).changed == [up, other]


def test_deleting_finished_jobs_keeps_the_figures_equal_to_the_rows(
    clocked_queue: errands.Queue,
) -> None:
    q = clocked_queue
    ids = [q.enqueue("t", {}) for _ in range(3)]
    held = claim(q, ["t"], limit=3)
    q.backend.finish([Succeeded(h.id, h.attempt, q.clock(), None) for h in held], "w1", q.clock())
    before = q.throughput(hours=1)[-1]["succeeded"]
    assert q.stats()["counts"]["succeeded"] == 3
    assert q.delete(ids[0], ids[1]).changed == ids[:2]
    assert q.stats()["counts"]["succeeded"] == 1  # the kept counts follow the rows
    q.recount_figures()
    assert q.stats()["counts"]["succeeded"] == 1
    # what happened stays history (the hourly rollup, as prune keeps it)
    assert q.throughput(hours=1)[-1]["succeeded"] == before == 3


def test_a_job_claimed_before_the_delete_is_refused_and_its_outcome_kept(
    queue: errands.Queue,
) -> None:
    job_id = queue.enqueue("t", {})
    (held,) = claim(queue, ["t"])
    assert queue.delete(job_id).changed == []
    assert queue.run_now(job_id).changed == []
    assert queue.set_priority(4, job_id).changed == []
    applied = queue.backend.finish(
        [Succeeded(held.id, held.attempt, queue.clock(), "1")], "w1", queue.clock()
    )
    assert applied == [True]
    assert get_job(queue, job_id).status == "succeeded"


def test_concurrent_claims_and_deletes_never_lose_an_outcome(
    make_queue: object,
) -> None:
    """A worker claims and finishes while an operator deletes the same jobs: every outcome the
    worker reports is recorded (no job is deleted under it while running); a job is deleted
    before its claim or after its outcome, never in between."""
    q = make_queue()  # type: ignore[operator]
    ids = [q.enqueue("t", {}) for _ in range(200)]
    finished: list[int] = []
    lost: list[int] = []
    stop = threading.Event()

    def work() -> None:
        while not stop.is_set():
            held = claim(q, ["t"], limit=5)
            if not held:
                return
            applied = q.backend.finish(
                [Succeeded(h.id, h.attempt, q.clock(), None) for h in held], "w1", q.clock()
            )
            finished.extend(h.id for h, ok in zip(held, applied, strict=True) if ok)
            lost.extend(h.id for h, ok in zip(held, applied, strict=True) if not ok)

    worker = threading.Thread(target=work)
    worker.start()
    deleted: list[int] = []
    for i in range(0, len(ids), 10):
        deleted += q.delete(*ids[i : i + 10]).changed
    stop.set()
    worker.join()
    assert lost == []
    for job_id in set(finished) - set(deleted):
        assert get_job(q, job_id).status == "succeeded"
    left = {j.id for j in q.jobs(limit=1000)}
    assert left == set(ids) - set(deleted)


# -- hostile input ---------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [0, -1, 2**63, "1", None, 1.0, True])
def test_every_action_refuses_a_bad_id(queue: errands.Queue, bad: object) -> None:
    job_id = queue.enqueue("t", {}, delay=60)
    for act in (queue.delete, queue.run_now, lambda *ids: queue.set_priority(1, *ids)):
        with pytest.raises(errands.ConfigurationError, match="id"):
            act(job_id, bad)  # type: ignore[arg-type]
    assert get_job(queue, job_id).priority == 0  # nothing applied: checked before writing


def test_actions_need_ids_and_a_bounded_list(queue: errands.Queue) -> None:
    with pytest.raises(errands.ConfigurationError, match="at least one"):
        queue.delete()
    with pytest.raises(errands.ConfigurationError, match="at most 10,000"):
        queue.run_now(*range(1, 10_002))
    with pytest.raises(errands.ConfigurationError, match="actor"):
        queue.delete(1, actor="")
