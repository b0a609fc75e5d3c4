"""Concurrent producers: calls that arrive while a commit is in flight share the next one
(SQLite: client/grouping.py), and every call still gets exactly what it would alone — its
own ids in order, unique keys as if sequential, middleware and a refused job its own."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import Any

import pytest

import errands
from errands.backends.base import EnqueueCall
from helpers.support import get_job, is_sqlite, sql_rows, wait_for

Release = Callable[[int], None]


@contextlib.contextmanager
def writes_held(q: errands.Queue, sizes: list[int]) -> Iterator[Release]:
    """SQLite: hold the file's write lock, so the first enqueue (the leader) waits in BEGIN
    and the calls after it queue up; ``release(n)`` lets go once n calls are queued, and they
    are written as one group. ``sizes`` collects the size of every group written together.
    PostgreSQL: no groups in the client (the server commits connections together), so
    nothing is held: the calls simply run concurrently."""
    group = q._producer.group
    if group is None:
        yield lambda n: None
        return
    write_group = group._write_group

    def spy(calls: Sequence[EnqueueCall]) -> list[list[int]]:
        sizes.append(len(calls))
        return write_group(calls)

    group._write_group = spy
    holder = sqlite3.connect(q.url, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")

    def release(n: int) -> None:
        wait_for(lambda: group.queued == n, what=f"{n} calls queued behind the leader")
        holder.execute("ROLLBACK")

    try:
        yield release
    finally:
        if holder.in_transaction:
            holder.execute("ROLLBACK")
        holder.close()


def leading(q: errands.Queue) -> Callable[[], bool]:
    """True once a leader is writing (it then waits on the held lock); always on PostgreSQL."""
    group = q._producer.group
    return lambda: group is None or group._leading


def run_threads(
    calls: Sequence[Callable[[], Any]], before: Callable[[], Any]
) -> tuple[list[threading.Thread], list[Any]]:
    """Start one thread per call, the first alone until ``before()`` holds; results in order
    (an exception in a call is its result)."""
    results: list[Any] = [None] * len(calls)

    def run(n: int) -> None:
        try:
            results[n] = calls[n]()
        except Exception as exc:
            results[n] = exc

    threads = [threading.Thread(target=run, args=(n,)) for n in range(len(calls))]
    threads[0].start()
    wait_for(before, what="the first call leading")
    for t in threads[1:]:
        t.start()
    return threads, results


def test_calls_queued_behind_a_commit_are_written_together_each_with_its_own_ids(
    make_queue: Callable[..., errands.Queue],
) -> None:
    q = make_queue(busy_timeout=30)
    sizes: list[int] = []
    calls: list[Callable[[], Any]] = [lambda: [q.enqueue("t", {"call": 0, "n": 0})]]
    calls += [
        partial(q.enqueue_many, [("t", {"call": c, "n": n}) for n in range(3)]) for c in range(1, 8)
    ]
    with writes_held(q, sizes) as release:
        threads, results = run_threads(calls, leading(q))
        release(7)
        for t in threads:
            t.join()
    for c, ids in enumerate(results):
        assert ids == sorted(ids) and len(ids) == (1 if c == 0 else 3)
        assert [get_job(q, i).payload for i in ids] == [
            {"call": c, "n": n} for n in range(len(ids))
        ]
    assert len({i for ids in results for i in ids}) == 22
    if is_sqlite(q.url):
        assert sizes == [7]  # the leader's call alone, then the seven queued behind it


def test_one_unique_key_in_a_group_behaves_as_if_the_calls_ran_one_after_another(
    make_queue: Callable[..., errands.Queue],
) -> None:
    q = make_queue(busy_timeout=30)
    sizes: list[int] = []
    calls: list[Callable[[], Any]] = [lambda: q.enqueue("t", {"lead": True})]
    calls += [partial(q.enqueue, "t", {"n": n}, unique_key="k") for n in range(5)]
    calls += [partial(q.enqueue, "t", {"n": n}, unique_key="other") for n in range(2)]
    with writes_held(q, sizes) as release:
        threads, results = run_threads(calls, leading(q))
        release(7)
        for t in threads:
            t.join()
    assert len(set(results[1:6])) == 1 and len(set(results[6:])) == 1
    assert results[1] != results[6]
    rows = sql_rows(q.url, "SELECT unique_key, count(*) FROM jobs GROUP BY unique_key")
    assert sorted(rows, key=str) == sorted([(None, 1), ("k", 1), ("other", 1)], key=str)
    assert sql_rows(q.url, "SELECT count(*) FROM job_events WHERE event = 'ENQUEUED'") == [(3,)]
    if is_sqlite(q.url):
        assert sizes == [7]


def test_a_group_closes_at_its_bound_of_jobs_without_splitting_a_call(
    make_queue: Callable[..., errands.Queue], monkeypatch: pytest.MonkeyPatch
) -> None:
    from errands.client import grouping

    monkeypatch.setattr(grouping, "MAX_GROUP_JOBS", 5)
    q = make_queue(busy_timeout=30)
    sizes: list[int] = []
    calls: list[Callable[[], Any]] = [lambda: [q.enqueue("t", {"call": 0, "n": 0})]]
    calls += [
        partial(q.enqueue_many, [("t", {"call": c, "n": n}) for n in range(3)]) for c in range(1, 5)
    ]
    with writes_held(q, sizes) as release:
        threads, results = run_threads(calls, leading(q))
        release(4)
        for t in threads:
            t.join()
    for c, ids in enumerate(results):
        assert [get_job(q, i).payload for i in ids] == [
            {"call": c, "n": n} for n in range(len(ids))
        ]
    if is_sqlite(q.url):
        assert sizes == [2, 2]  # 3 + 3 jobs reach the bound of 5: two calls a group


def refuse_poison(url: str) -> None:
    """A trigger that makes the database itself refuse jobs of type 'poison' (the checks
    before the write cannot see it coming)."""
    if is_sqlite(url):
        conn = sqlite3.connect(url, isolation_level=None)
        conn.execute(
            "CREATE TRIGGER refuse_poison BEFORE INSERT ON jobs WHEN NEW.type = 'poison' "
            "BEGIN SELECT RAISE(ABORT, 'poison refused'); END"
        )
        conn.close()
        return
    import psycopg

    with psycopg.connect(url, autocommit=True) as pg:
        pg.execute(
            "CREATE FUNCTION refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "IF NEW.type = 'poison' THEN RAISE EXCEPTION 'poison refused'; END IF; "
            "RETURN NEW; END $$"
        )
        pg.execute(
            "CREATE TRIGGER refuse_poison BEFORE INSERT ON jobs FOR EACH ROW "
            "EXECUTE FUNCTION refuse_poison()"
        )


def test_a_job_the_database_refuses_fails_only_its_own_call_in_a_group(
    make_queue: Callable[..., errands.Queue],
) -> None:
    q = make_queue(busy_timeout=30)
    refuse_poison(q.url)
    sizes: list[int] = []
    calls: list[Callable[[], Any]] = [lambda: q.enqueue("t", {"n": 0})]
    calls += [partial(q.enqueue, "t", {"n": n}) for n in range(1, 4)]
    calls += [lambda: q.enqueue_many([("t", {"n": 4}), ("poison", {})])]
    calls += [partial(q.enqueue, "t", {"n": n}) for n in range(5, 8)]
    with writes_held(q, sizes) as release:
        threads, results = run_threads(calls, leading(q))
        release(7)
        for t in threads:
            t.join()
    culprit = results.pop(4)
    assert isinstance(culprit, errands.ErrandsError) and "poison refused" in str(culprit)
    assert [get_job(q, i).payload["n"] for i in results] == [0, 1, 2, 3, 5, 6, 7]
    # the culprit's whole call is refused: its good job is not stored either
    assert sql_rows(q.url, "SELECT count(*) FROM jobs") == [(7,)]
    if is_sqlite(q.url):
        assert sizes == [7]  # tried together, refused, then written one by one


class Stamp(errands.Middleware):
    """Sets a header naming the caller, and checks after the write that it sees its id."""

    def __init__(self) -> None:
        self.seen: dict[str, int | None] = {}
        self.lock = threading.Lock()

    def enqueue(self, job: errands.Enqueuing) -> Iterator[None]:
        who = str(job.payload["who"])
        job.headers["who"] = who
        yield
        with self.lock:
            self.seen[who] = job.id


def check_each_call_got_its_own(q: errands.Queue, stamp: Stamp, got: dict[str, int]) -> None:
    assert len(set(got.values())) == len(got)
    assert stamp.seen == got  # middleware's after-part saw the id its own call returned
    for who, job_id in got.items():
        job = get_job(q, job_id)
        assert job.payload == {"who": who} and job.headers == {"who": who}


def test_eight_threads_each_get_their_own_ids_in_order_and_their_middleware(
    make_queue: Callable[..., errands.Queue],
) -> None:
    q = make_queue()
    stamp = Stamp()
    q.use(stamp)
    got: dict[str, int] = {}
    shared: list[int] = []

    def produce(t: int) -> None:
        mine = []
        for n in range(40):
            who = f"{t}-{n}"
            mine.append(q.enqueue("t", {"who": who}))
            got[who] = mine[-1]
            if n == 20:
                shared.append(q.enqueue("u", {"who": f"shared-{t}"}, unique_key="shared"))
        assert mine == sorted(mine)

    threads = [threading.Thread(target=produce, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(shared) == 8 and len(set(shared)) == 1
    stamp.seen = {k: v for k, v in stamp.seen.items() if not k.startswith("shared")}
    check_each_call_got_its_own(q, stamp, got)
    assert sql_rows(q.url, "SELECT count(*) FROM jobs") == [(8 * 40 + 1,)]


def test_sixty_four_tasks_each_get_their_own_ids_in_order_and_their_middleware(
    make_queue: Callable[..., errands.Queue],
) -> None:
    q = make_queue()
    stamp = Stamp()
    q.use(stamp)
    got: dict[str, int] = {}
    shared: list[int] = []

    async def produce(t: int) -> None:
        mine = []
        for n in range(5):
            who = f"{t}-{n}"
            mine.append(await q.enqueue_async("t", {"who": who}))
            got[who] = mine[-1]
        assert mine == sorted(mine)
        shared.append(await q.enqueue_async("u", {"who": f"shared-{t}"}, unique_key="shared"))

    async def main() -> None:
        await asyncio.gather(*(produce(t) for t in range(64)))

    asyncio.run(main())
    assert len(shared) == 64 and len(set(shared)) == 1
    stamp.seen = {k: v for k, v in stamp.seen.items() if not k.startswith("shared")}
    check_each_call_got_its_own(q, stamp, got)
    assert sql_rows(q.url, "SELECT count(*) FROM jobs") == [(64 * 5 + 1,)]


def test_threads_and_tasks_enqueueing_at_once_hand_the_lead_to_each_other(
    make_queue: Callable[..., errands.Queue],
) -> None:
    """Groups mixing threads' and tasks' calls: a thread leader hands the lead to the writer
    thread when a task is next, and the writer thread back to a thread."""
    q = make_queue()
    got: dict[str, int] = {}

    def thread_producer(t: int) -> None:
        for n in range(30):
            got[f"t{t}-{n}"] = q.enqueue("t", {"who": f"t{t}-{n}"})

    async def task_producer(k: int) -> None:
        for n in range(5):
            got[f"a{k}-{n}"] = await q.enqueue_async("t", {"who": f"a{k}-{n}"})

    async def tasks() -> None:
        await asyncio.gather(*(task_producer(k) for k in range(32)))

    threads = [threading.Thread(target=thread_producer, args=(t,)) for t in range(6)]
    threads.append(threading.Thread(target=asyncio.run, args=(tasks(),)))
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
        assert not t.is_alive(), "a producer never returned"
    assert len(got) == 6 * 30 + 32 * 5 and len(set(got.values())) == len(got)
    rows = sql_rows(q.url, "SELECT id, payload FROM jobs")
    assert {json.loads(p)["who"] if isinstance(p, str) else p["who"]: i for i, p in rows} == got


def test_a_lone_producer_after_a_crowd_still_commits_at_once(
    make_queue: Callable[..., errands.Queue],
) -> None:
    q = make_queue()
    threads = [
        threading.Thread(target=lambda: [q.enqueue("t", {}) for _ in range(10)]) for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    group = q._producer.group
    assert group is None or (group.queued == 0 and not group._leading)
    job_id = q.enqueue("t", {"last": True})
    assert get_job(q, job_id).payload == {"last": True}


@pytest.mark.parametrize("kind", ["thread", "task"])
def test_enqueue_with_connection_stays_in_the_callers_transaction(
    make_queue: Callable[..., errands.Queue], kind: str
) -> None:
    q = make_queue()
    if is_sqlite(q.url):
        conn = sqlite3.connect(q.url)
        conn.execute("BEGIN")
        if kind == "thread":
            job_id = q.enqueue("t", {}, connection=conn)
        else:
            job_id = asyncio.run(q.enqueue_async("t", {}, connection=conn))
        conn.rollback()
        conn.close()
    elif kind == "thread":
        import psycopg

        with psycopg.connect(q.url) as pg:
            job_id = q.enqueue("t", {}, connection=pg)
            pg.rollback()
    else:
        import psycopg

        async def in_transaction() -> int:
            async with await psycopg.AsyncConnection.connect(q.url) as apg:
                job_id = await q.enqueue_async("t", {}, connection=apg)
                await apg.rollback()
            await q.aclose()
            return job_id

        job_id = asyncio.run(in_transaction())
    assert sql_rows(q.url, "SELECT count(*) FROM jobs") == [(0,)], job_id


def test_the_runtime_doc_states_the_group_commit_and_names_its_tests() -> None:
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    text = " ".join((root / "docs" / "runtime.md").read_text().split())
    assert "**Concurrent producers share a commit.**" in text
    for cited in ("tests/client/test_group_commit.py", "tests/runtime/test_producer_kill.py"):
        assert f"`{cited}`" in text and (root / cited).is_file(), cited
