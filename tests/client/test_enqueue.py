"""Enqueue: rows written, scheduling, unique keys, payload checks, batches, unknown types."""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import errands
from errands.backends.base import Succeeded
from helpers.support import FixedClock, claim, event_names, get_job, sql_rows


def test_enqueue_five_jobs_gives_five_queued_rows(queue: errands.Queue) -> None:
    ids = [queue.enqueue("send", {"n": n}) for n in range(5)]

    assert ids == sorted(ids) and len(set(ids)) == 5
    jobs = queue.jobs(status="queued")
    assert sorted(j.id for j in jobs) == ids
    assert all(j.status == "queued" and j.attempts == 0 for j in jobs)
    assert [get_job(queue, i).payload for i in ids] == [{"n": n} for n in range(5)]
    # the public table, read with plain SQL
    rows = sql_rows(queue.url, "SELECT id, status, type, queue FROM jobs ORDER BY id")
    assert rows == [(i, "queued", "send", "default") for i in ids]


def test_enqueue_records_an_enqueued_event_by_api(queue: errands.Queue) -> None:
    job_id = queue.enqueue("send", {})
    (event,) = queue.events(job_id)
    assert (event.event, event.actor) == ("ENQUEUED", "api")


def test_task_enqueue_uses_function_name_and_task_options(make_queue: Callable[..., Any]) -> None:
    q: errands.Queue = make_queue()

    @q.task(queue="emails", priority=3, max_attempts=7)
    def send_email(to: str) -> None: ...

    job = q.get(send_email.enqueue(to="a@example.com"))
    assert job is not None
    assert (job.type, job.queue, job.priority, job.max_attempts) == ("send_email", "emails", 3, 7)
    assert job.payload == {"to": "a@example.com"}


def test_delay_is_not_claimed_before_its_time(
    clocked_queue: errands.Queue, clock: FixedClock
) -> None:
    start = clock.now
    job_id = clocked_queue.enqueue("t", {}, delay=60)

    job = clocked_queue.get(job_id)
    assert job is not None and job.run_at == datetime.fromtimestamp(start + 60, UTC)
    assert claim(clocked_queue, ["t"]) == []
    clock.advance(59.5)
    assert claim(clocked_queue, ["t"]) == []
    clock.advance(0.5)
    assert [j.id for j in claim(clocked_queue, ["t"])] == [job_id]


def test_delay_accepts_a_timedelta(clocked_queue: errands.Queue, clock: FixedClock) -> None:
    job_id = clocked_queue.enqueue("t", {}, delay=timedelta(minutes=2))
    clock.advance(119)
    assert claim(clocked_queue, ["t"]) == []
    clock.advance(1)
    assert [j.id for j in claim(clocked_queue, ["t"])] == [job_id]


def test_run_at_datetime_schedules_the_job(clocked_queue: errands.Queue, clock: FixedClock) -> None:
    when = datetime.fromtimestamp(clock.now + 3600, UTC)
    job_id = clocked_queue.enqueue("t", {}, run_at=when)

    job = clocked_queue.get(job_id)
    assert job is not None and job.run_at == when and job.status == "queued"
    clock.advance(3599)
    assert claim(clocked_queue, ["t"]) == []
    clock.advance(1)
    assert [j.id for j in claim(clocked_queue, ["t"])] == [job_id]


def test_naive_run_at_is_refused(queue: errands.Queue) -> None:
    with pytest.raises(ValueError, match="naive datetime"):
        queue.enqueue("t", {}, run_at=datetime(2030, 1, 1))
    assert queue.jobs() == []


def test_run_at_and_delay_together_are_refused(queue: errands.Queue) -> None:
    with pytest.raises(errands.ConfigurationError, match="not both"):
        queue.enqueue("t", {}, run_at=datetime.now(UTC), delay=5)
    assert queue.jobs() == []


# -- unique keys -------------------------------------------------------------------------


def test_unique_key_returns_the_queued_job(queue: errands.Queue) -> None:
    first = queue.enqueue("t", {"a": 1}, unique_key="welcome:42")
    again = queue.enqueue("t", {"a": 2}, unique_key="welcome:42")

    assert again == first
    assert len(queue.jobs()) == 1
    assert event_names(queue, first) == ["ENQUEUED"]


def test_unique_key_returns_the_running_job(clocked_queue: errands.Queue) -> None:
    first = clocked_queue.enqueue("t", {}, unique_key="k")
    (claimed,) = claim(clocked_queue, ["t"])
    assert claimed.id == first

    assert clocked_queue.enqueue("t", {}, unique_key="k") == first
    assert len(clocked_queue.jobs()) == 1


def test_unique_key_allows_a_new_job_once_the_first_finished(
    clocked_queue: errands.Queue, clock: FixedClock
) -> None:
    first = clocked_queue.enqueue("t", {}, unique_key="k")
    assert [j.id for j in claim(clocked_queue, ["t"])] == [first]
    assert clocked_queue.backend.finish([Succeeded(first, 1, clock.now, None)], "w1", clock.now)

    second = clocked_queue.enqueue("t", {}, unique_key="k")
    assert second != first
    assert [j.status for j in clocked_queue.jobs()] == ["queued", "succeeded"]
    # and the new one is now the active holder of the key
    assert clocked_queue.enqueue("t", {}, unique_key="k") == second


def test_unique_key_allows_a_new_job_once_the_first_was_cancelled(queue: errands.Queue) -> None:
    first = queue.enqueue("t", {}, unique_key="k")
    queue.cancel(first)
    assert queue.enqueue("t", {}, unique_key="k") != first


def test_unique_key_dedups_within_one_enqueue_many(queue: errands.Queue) -> None:
    ids = queue.enqueue_many(
        [("t", {"n": 1}, {"unique_key": "k"}), ("t", {"n": 2}, {"unique_key": "k"}), ("t", {})]
    )
    assert ids[0] == ids[1] != ids[2]
    assert len(queue.jobs()) == 2


# -- payload checks ----------------------------------------------------------------------

BAD_PAYLOADS = [
    pytest.param({"x": math.nan}, "NaN", id="nan"),
    pytest.param({"x": math.inf}, "Infinity", id="infinity"),
    pytest.param({"x": {1, 2}}, "set", id="set"),
    pytest.param({"x": b"raw"}, "bytes", id="bytes"),
    pytest.param({"x": datetime(2030, 1, 1, tzinfo=UTC)}, "datetime", id="datetime"),
    pytest.param({"x": (1, 2)}, "tuple", id="tuple"),
    pytest.param({1: "a"}, "keys must be strings", id="int-key"),
    pytest.param({"outer": [1, {"deep": math.nan}]}, "['outer'][1]['deep']", id="nested-path"),
    pytest.param({"x": object()}, "object", id="object"),
]


@pytest.mark.parametrize(("payload", "named"), BAD_PAYLOADS)
def test_non_json_payload_is_refused_and_nothing_written(
    queue: errands.Queue, payload: Any, named: str
) -> None:
    with pytest.raises(errands.PayloadError) as info:
        queue.enqueue("t", payload)
    assert named in str(info.value)
    assert isinstance(info.value, TypeError)  # a TypeError-style error, as json.dumps would
    assert queue.jobs() == []


def test_oversized_payload_is_refused_and_nothing_written(make_queue: Callable[..., Any]) -> None:
    q: errands.Queue = make_queue(max_payload_bytes=100)
    q.enqueue("t", {"s": "x" * 50})  # fits

    with pytest.raises(errands.PayloadTooLargeError, match="max_payload_bytes"):
        q.enqueue("t", {"s": "x" * 200})
    assert len(q.jobs()) == 1


def test_payload_is_checked_against_the_task_signature_at_enqueue(
    make_queue: Callable[..., Any],
) -> None:
    q: errands.Queue = make_queue()

    @q.task
    def greet(name: str) -> None: ...

    with pytest.raises(errands.PayloadError, match="greet"):
        q.enqueue("greet", {"nmae": "x"})
    with pytest.raises(errands.PayloadError, match="dict"):
        q.enqueue("greet", ["x"])
    assert q.jobs() == []


# -- enqueue_many --------------------------------------------------------------------------


def test_enqueue_many_returns_ids_in_order(queue: errands.Queue) -> None:
    ids = queue.enqueue_many([("t", {"n": n}) for n in range(100)] + [("u", {}, {"priority": 5})])

    assert len(ids) == 101 and ids == sorted(ids)
    assert [get_job(queue, i).payload for i in ids[:3]] == [{"n": 0}, {"n": 1}, {"n": 2}]
    last = queue.get(ids[-1])
    assert last is not None and (last.type, last.priority) == ("u", 5)


@pytest.mark.parametrize("count", [2, 7, 40])
def test_enqueue_many_in_chunks_keeps_every_job_with_its_own_id_and_event(
    queue: errands.Queue, monkeypatch: pytest.MonkeyPatch, count: int
) -> None:
    # Chunks of 3 rows: the batched insert's ids must map back to items across chunks.
    from errands.backends import jobs

    monkeypatch.setattr(jobs, "CHUNK_ROWS", 3)
    items: list[Any] = [
        (
            "t",
            {"n": n},
            {"queue": f"q{n % 2}", "priority": n % 3, "delay": n, "max_attempts": n + 1},
        )
        for n in range(count)
    ]
    before = queue.clock()
    ids = queue.enqueue_many(items)

    assert len(ids) == count and ids == sorted(ids) and len(set(ids)) == count
    for n, job_id in enumerate(ids):
        job = queue.get(job_id)
        assert job is not None
        assert job.payload == {"n": n}
        assert (job.queue, job.priority, job.max_attempts) == (f"q{n % 2}", n % 3, n + 1)
        assert job.run_at is not None and job.run_at.timestamp() >= before + n - 1
        assert event_names(queue, job_id) == ["ENQUEUED"]
    # A later single enqueue still gets a new, larger id.
    assert queue.enqueue("t", {}) > ids[-1]


@pytest.mark.parametrize("chunk_rows", [5000, 50])
def test_enqueue_many_in_runs_of_alike_jobs_gives_each_job_its_own_runs_fields(
    queue: errands.Queue, monkeypatch: pytest.MonkeyPatch, chunk_rows: int
) -> None:
    # Consecutive jobs that differ only in payload go in one statement per run, their shared
    # fields bound once (insert_jobs_alike): each field must land on its own run's jobs only,
    # in order, across chunk boundaries (chunks of 50 cut runs in two), with one event each.
    from errands.backends import jobs

    monkeypatch.setattr(jobs, "CHUNK_ROWS", chunk_rows)
    if queue.url.startswith("postgresql"):  # there, batches this large go in by COPY
        from errands.backends import postgres

        monkeypatch.setattr(postgres, "COPY_THRESHOLD", 10_000)
    from errands.backends import bulk_rows

    cut = bulk_rows.alike_runs
    runs_seen: list[int] = []

    def spy(chunk: Any, run_min: int) -> Any:
        runs = cut(chunk, run_min)
        runs_seen.append(0 if runs is None else len(runs))
        return runs

    monkeypatch.setattr(jobs, "alike_runs", spy)
    spec: list[tuple[dict[str, Any], int]] = [
        ({"queue": "a"}, 40),
        ({"queue": "b", "priority": 3}, 70),
        ({"max_attempts": 2, "delay": 30}, 45),
        ({}, 33),
    ]
    items: list[Any] = []
    for options, count in spec:
        items += [("t", {"n": len(items) + k}, options) for k in range(count)]
    before = queue.clock()
    ids = queue.enqueue_many(items)

    assert any(runs_seen), "no chunk went in as runs of alike jobs"
    assert len(ids) == len(items) and ids == sorted(ids) and len(set(ids)) == len(ids)
    n = 0
    for options, count in spec:
        for _ in range(count):
            job = get_job(queue, ids[n])
            assert job.payload == {"n": n}
            assert (job.queue, job.priority, job.max_attempts) == (
                options.get("queue", "default"),
                options.get("priority", 0),
                options.get("max_attempts", 20),
            )
            assert job.run_at is not None
            wait = job.run_at.timestamp() - before
            assert (29 < wait < 31) if "delay" in options else (-1 < wait < 1)
            assert event_names(queue, ids[n]) == ["ENQUEUED"]
            n += 1


def test_enqueue_many_with_unique_keys_keeps_the_holders_id(queue: errands.Queue) -> None:
    held = queue.enqueue("t", {"n": 0}, unique_key="k")
    ids = queue.enqueue_many([("t", {"n": 1}), ("t", {"n": 2}, {"unique_key": "k"})])
    assert ids[1] == held and ids[0] > held
    assert event_names(queue, ids[0]) == ["ENQUEUED"]


def test_enqueue_many_with_a_bad_item_writes_nothing(queue: errands.Queue) -> None:
    items: list[Any] = [("t", {"n": 1}), ("t", {"n": 2}), ("t", {"bad": {1}}), ("t", {"n": 4})]
    with pytest.raises(errands.PayloadError, match="item 2"):
        queue.enqueue_many(items)
    assert queue.jobs() == []


def test_enqueue_many_with_a_malformed_item_writes_nothing(queue: errands.Queue) -> None:
    with pytest.raises(errands.PayloadError, match="item 1"):
        queue.enqueue_many([("t", {}), "t"])  # type: ignore[list-item]
    assert queue.jobs() == []


def test_enqueue_many_checks_every_item_of_a_repeated_type_against_its_task(
    make_queue: Callable[..., Any],
) -> None:
    # The type's checks are looked up once per call; each item's payload is still checked
    # against the handler, an item of no payload included, and the task's options apply.
    q: errands.Queue = make_queue()

    @q.task(queue="mail", priority=4, max_attempts=3)
    def send(to: str) -> None: ...

    for bad, index in (({"too": "x"}, 2), (None, 1), ([1], 3)):
        items: list[Any] = [("send", {"to": "a"}), ("send", {"to": "b"}), ("send", {"to": "c"})]
        items.insert(index, ("send", bad))
        with pytest.raises(errands.PayloadError, match=f"^enqueue_many item {index}: "):
            q.enqueue_many(items)
    assert q.jobs() == []
    ids = q.enqueue_many([("send", {"to": "a"}), ("send", {"to": "b"}, {"priority": 9})])
    jobs = [q.get(i) for i in ids]
    assert [(j.queue, j.priority, j.max_attempts, j.payload) for j in jobs if j] == [
        ("mail", 4, 3, {"to": "a"}),
        ("mail", 9, 3, {"to": "b"}),
    ]


def test_enqueue_many_of_nothing_is_a_no_op(queue: errands.Queue) -> None:
    assert queue.enqueue_many([]) == []


# -- job types -----------------------------------------------------------------------------


def test_unknown_task_type_is_refused_when_the_queue_has_tasks(
    make_queue: Callable[..., Any],
) -> None:
    q: errands.Queue = make_queue()

    @q.task
    def known() -> None: ...

    with pytest.raises(errands.UnknownTaskError, match=r"'unknonw'.*known"):
        q.enqueue("unknonw", {})
    with pytest.raises(errands.UnknownTaskError):
        q.enqueue_many([("known", {}), ("unknonw", {})])
    assert q.jobs() == []


def test_a_queue_without_tasks_enqueues_any_type(queue: errands.Queue) -> None:
    job = queue.get(queue.enqueue("runs_elsewhere", {"a": 1}))
    assert job is not None and job.type == "runs_elsewhere"


def test_bad_enqueue_options_are_refused(queue: errands.Queue) -> None:
    with pytest.raises(errands.ConfigurationError, match="max_attempts"):
        queue.enqueue("t", {}, max_attempts=0)
    with pytest.raises(errands.ConfigurationError, match="priority"):
        queue.enqueue("t", {}, priority="high")  # type: ignore[arg-type]
    with pytest.raises(errands.ConfigurationError, match="delay"):
        queue.enqueue("t", {}, delay=-1)
    assert queue.jobs() == []


def test_enqueue_many_ids_and_events_stay_exact_across_gaps_in_the_id_sequence(
    queue: errands.Queue, db_url: str
) -> None:
    """SQLite writes alike runs without RETURNING, taking each run's ids as the consecutive
    range ending at the statement's last id, and both backends write a chunk's events by id
    range when its ids are one range: attack both with a sequence that jumped (deleted jobs at
    the top, the counter moved on) and jobs of other transactions around the batch."""
    first = queue.enqueue_many([("t", {"old": n}) for n in range(50)])
    jump = (
        "SELECT setval(pg_get_serial_sequence('jobs', 'id'), 10000)"
        if db_url.startswith("postgresql")
        else "UPDATE sqlite_sequence SET seq = 10000 WHERE name = 'jobs'"
    )
    # the top jobs gone, the counter far ahead
    with queue.backend._write("test") as conn:  # type: ignore[attr-defined]
        conn.execute(f"DELETE FROM jobs WHERE id > {first[10]}")
        conn.execute(jump)
    items: list[Any] = [("t", {"n": n}) for n in range(150)]
    items += [("u", {"n": 150 + n}, {"priority": 3}) for n in range(40)]  # another run
    items += [("t", {"n": 190 + n}) for n in range(70)]
    ids = queue.enqueue_many(items)
    after = queue.enqueue("t", {"after": True})

    assert len(ids) == len(items) == len(set(ids)) and ids == sorted(ids) and ids[0] > 10000
    assert after > ids[-1]
    for job_id, (_, payload, *_rest) in zip(ids, items, strict=True):
        assert get_job(queue, job_id).payload == payload
    counts = sql_rows(
        db_url,
        "SELECT job_id, count(*) FROM job_events WHERE event = 'ENQUEUED' "
        f"AND job_id >= {ids[0]} GROUP BY job_id ORDER BY job_id",
    )
    assert counts == [(i, 1) for i in [*ids, after]]
