"""Step records of concurrent handlers share a commit (backends/step_group.py), on both
backends: each record is still fenced on its own attempt, each caller learns its own answer
only once the commit holding its record has happened, and a failed write is every waiting
caller's error — never a record silently dropped or buffered past its caller's return."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

import pytest

import errands
from errands.backends.base import ClaimedJob
from errands.backends.step_group import StepGroup
from errands.core.records import StepRecord
from helpers.support import claim


def _record(job_id: int, attempt: int, seq: int = 0, name: str = "s") -> StepRecord:
    return StepRecord(job_id, attempt, seq, "step", name, 1.0, finished_at=2.0, result='{"n":1}')


def test_one_write_of_many_records_fences_each_on_its_own_attempt(queue: errands.Queue) -> None:
    @queue.task()
    def work(ctx: errands.JobContext) -> None:
        return None

    ids = [work.enqueue() for _ in range(3)]
    held = {j.id: j for j in claim(queue, ["work"], limit=3)}
    assert sorted(held) == sorted(ids)
    a, b, c = ids
    records = [
        _record(a, held[a].attempt),
        _record(b, held[b].attempt + 1),  # an attempt that never held the job: stale
        _record(c, held[c].attempt, seq=0, name="first"),
    ]
    assert queue.backend._record_many(records) == [True, False, True]  # type: ignore[attr-defined]
    assert [(s.name, s.result) for s in queue.steps(a)] == [("s", {"n": 1})]
    assert queue.steps(b) == []
    assert [s.name for s in queue.steps(c)] == ["first"]


def test_concurrent_records_each_get_their_answer_once_committed(queue: errands.Queue) -> None:
    @queue.task()
    def work(ctx: errands.JobContext) -> None:
        return None

    n = 12
    for _ in range(n):
        work.enqueue()
    held = claim(queue, ["work"], limit=n)
    start = threading.Barrier(n)
    answers: dict[int, bool] = {}

    def record(job: ClaimedJob) -> None:
        stale = job.id % 3 == 0
        start.wait()
        rec = _record(job.id, job.attempt + (1 if stale else 0))
        answers[job.id] = queue.backend.record_step(rec, queue.clock())
        # Committed before the call returned: another connection sees it at once.
        assert (len(queue.steps(job.id)) == 1) is (not stale)

    threads = [threading.Thread(target=record, args=(job,)) for job in held]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert answers == {job.id: job.id % 3 != 0 for job in held}


class _Gated:
    """A write function whose first write waits until the test lets it go, so the records
    submitted meanwhile all wait for the next write, together."""

    def __init__(self, fail_second: bool = False) -> None:
        self.batches: list[list[int]] = []
        self.gate = threading.Event()
        self.fail_second = fail_second

    def __call__(self, records: Sequence[int]) -> list[bool]:
        self.batches.append(list(records))
        if len(self.batches) == 1:
            self.gate.wait(30)
        if self.fail_second and len(self.batches) == 2:
            raise RuntimeError("disk full")
        return [r % 2 == 0 for r in records]


def _submit_all(group: StepGroup[int], gated: _Gated, later: list[int]) -> dict[int, object]:
    out: dict[int, object] = {}

    def submit(r: int) -> None:
        try:
            out[r] = group.submit(r)
        except RuntimeError as exc:
            out[r] = exc

    first = threading.Thread(target=submit, args=(0,))
    first.start()
    while not gated.batches:  # the first caller is writing (and held at the gate)
        threading.Event().wait(0.001)
    threads = [threading.Thread(target=submit, args=(r,)) for r in later]
    for t in threads:
        t.start()
    while len(group._pending) < len(later):  # all of them queued behind the write
        threading.Event().wait(0.001)
    gated.gate.set()
    for t in [first, *threads]:
        t.join(30)
    return out


def test_records_arriving_during_a_write_share_the_next_one() -> None:
    gated = _Gated()
    group: StepGroup[int] = StepGroup(gated)
    out = _submit_all(group, gated, [1, 2, 3, 4])
    assert gated.batches[0] == [0]
    assert sorted(gated.batches[1]) == [1, 2, 3, 4]  # one write, one commit for all four
    assert out == {0: True, 1: False, 2: True, 3: False, 4: True}


def test_a_failed_write_is_the_error_of_every_record_in_it() -> None:
    gated = _Gated(fail_second=True)
    group: StepGroup[int] = StepGroup(gated)
    out = _submit_all(group, gated, [1, 2, 3])
    assert out[0] is True
    assert all(isinstance(out[r], RuntimeError) for r in (1, 2, 3))
    assert group.submit(6) is True  # the group writes again after a failure


def test_a_writer_stopped_by_an_interrupt_leaves_no_one_waiting() -> None:
    calls: list[int] = []

    def write(records: Sequence[int]) -> list[bool]:
        calls.append(len(records))
        if len(calls) == 1:
            raise KeyboardInterrupt
        return [True] * len(records)

    group: StepGroup[int] = StepGroup(write)
    with pytest.raises(KeyboardInterrupt):
        group.submit(1)
    assert group.submit(2) is True  # not stuck behind a writer that is gone


def test_two_queues_in_one_process_record_each_in_its_own_database(tmp_path: Path) -> None:
    """Each backend has its own group: a record is written through its own Queue's
    connection, never through another Queue's that happened to be writing (job 1 exists in
    both files, so a record written through the wrong one would land in the wrong file)."""
    queues = [errands.Queue(str(tmp_path / f"{n}.db")) for n in ("a", "b")]
    try:
        held = []
        for q in queues:

            @q.task()
            def work(ctx: errands.JobContext) -> None:
                return None

            work.enqueue()
            (job,) = claim(q, ["work"])
            held.append(job)
        assert queues[0].backend._steps_group() is not queues[1].backend._steps_group()  # type: ignore[attr-defined]
        start = threading.Barrier(2 * 8)
        errors: list[BaseException] = []

        def record(q: errands.Queue, job: ClaimedJob, seq: int) -> None:
            start.wait()
            try:
                assert q.backend.record_step(_record(job.id, job.attempt, seq), q.clock())
            except BaseException as exc:
                errors.append(exc)

        threads = [
            threading.Thread(target=record, args=(q, job, seq))
            for q, job in zip(queues, held, strict=True)
            for seq in range(8)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert errors == []
        for q, job in zip(queues, held, strict=True):
            assert [s.seq for s in q.steps(job.id)] == list(range(8))
    finally:
        for q in queues:
            q.close()


def test_a_write_waits_for_a_steps_transaction_no_longer_than_the_busy_timeout(
    tmp_path: Path,
) -> None:
    """SQLite: the process's writes queue on one lock, which a step's own transaction
    (``connection=``) holds while its function runs; another write waits for it only as
    long as the busy handler would have, then fails as busy (retried by its caller)."""
    import sqlite3

    path = tmp_path / "app.db"
    with errands.Queue(str(path), busy_timeout=0.2) as q:
        app = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        inside, release = threading.Event(), threading.Event()

        def step_transaction() -> None:
            with q.backend.own_transaction(app):
                inside.set()
                release.wait(30)

        t = threading.Thread(target=step_transaction)
        t.start()
        try:
            assert inside.wait(30)
            with pytest.raises(errands.DatabaseBusyError):
                q.enqueue("anything", {})
        finally:
            release.set()
            t.join(30)
            app.close()
        assert q.enqueue("anything", {}) > 0  # the lock is free again
