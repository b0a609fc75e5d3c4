"""One truth for a task's options across processes (issue #21, item 1): the worker that runs a
task records its options (task_types) when it starts; a producer with no task of that name
enqueues with them; explicit options still win; an undeclared type takes the defaults and
``check`` warns. Both backends."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

import errands
from errands.cli import main
from helpers.support import get_job

Make = Callable[..., errands.Queue]


def _worker_app(q: errands.Queue) -> None:
    @q.task(queue="emails", max_attempts=5, priority=3, timeout=60)
    def send_welcome(user_id: int) -> None: ...


def _declare(make_queue: Make) -> errands.Queue:
    """A worker process: its tasks, one burst run (which records them at start)."""
    worker = make_queue()
    _worker_app(worker)
    worker.run_worker(burst=True, concurrency=1)
    return worker


def test_a_worker_records_its_tasks_options_when_it_starts(make_queue: Make) -> None:
    worker = _declare(make_queue)
    (row,) = worker.backend.task_types()
    assert (row.type, row.queue, row.priority, row.max_attempts, row.timeout_seconds) == (
        "send_welcome",
        "emails",
        3,
        5,
        60.0,
    )
    assert row.options == {} and row.declared_by is not None and row.declared_at is not None


def test_a_producer_enqueues_by_name_with_the_declared_options(make_queue: Make) -> None:
    worker = _declare(make_queue)
    web = make_queue()  # another process: no tasks of its own
    job = get_job(web, web.enqueue("send_welcome", {"user_id": 42}))
    assert (job.queue, job.priority, job.max_attempts) == ("emails", 3, 5)
    # ... so a worker that only looks at "emails" runs it.
    ran = worker.run_worker(burst=True, concurrency=1, queues=["emails"])
    assert ran is not None and get_job(web, job.id).status == "succeeded"


def test_explicit_options_at_enqueue_still_win(make_queue: Make) -> None:
    _declare(make_queue)
    web = make_queue()
    job = get_job(web, web.enqueue("send_welcome", {}, queue="urgent", priority=9, max_attempts=2))
    assert (job.queue, job.priority, job.max_attempts) == ("urgent", 9, 2)
    many = web.enqueue_many([("send_welcome", {}), ("send_welcome", {}, {"priority": 1})])
    got = [(j.queue, j.priority, j.max_attempts) for j in map(lambda i: get_job(web, i), many)]
    assert got == [("emails", 3, 5), ("emails", 1, 5)]


def test_an_undeclared_type_takes_the_defaults_and_check_warns(
    make_queue: Make, db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    web = make_queue()
    job = get_job(web, web.enqueue("report", {}))
    assert (job.queue, job.priority, job.max_attempts) == ("default", 0, 20)
    assert main(["--db", db_url, "check", "--json"]) == 1  # no live worker handles it either
    out = json.loads(capsys.readouterr().out)
    (warning,) = out["warnings"]
    assert "default/report" in warning and "no worker has declared" in warning


def test_the_cli_enqueue_follows_the_same_rule(
    make_queue: Make, db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _declare(make_queue)
    assert main(["--db", db_url, "enqueue", "send_welcome", "--payload", "{}"]) == 0
    job_id = int(capsys.readouterr().out)
    with errands.Queue(db_url) as q:
        job = get_job(q, job_id)
        assert (job.queue, job.priority, job.max_attempts) == ("emails", 3, 5)


def test_a_new_declaration_reaches_a_producer_within_the_cache_time(make_queue: Make) -> None:
    from errands.backends.base import TaskTypeRow
    from errands.client.declared import DeclaredOptions

    web = make_queue()
    ticks = [0.0]
    reads = [0]

    def read() -> list[TaskTypeRow]:
        reads[0] += 1
        return web.backend.task_types()

    cache = DeclaredOptions(read, ttl=30.0, monotonic=lambda: ticks[0])
    assert cache.get("send_welcome") is None  # nobody has declared it yet
    _declare(make_queue)
    ticks[0] = 29.0
    assert cache.get("send_welcome") is None and reads[0] == 1  # cached: no read per enqueue
    ticks[0] = 30.0
    options = cache.get("send_welcome")
    assert options is not None and (options.queue, options.max_attempts) == ("emails", 5)
    assert reads[0] == 2


def test_a_queue_with_tasks_of_its_own_never_reads_the_declarations(make_queue: Make) -> None:
    _declare(make_queue)
    other = make_queue()

    @other.task(queue="local")
    def send_welcome(user_id: int) -> None: ...

    assert get_job(other, send_welcome.enqueue(user_id=1)).queue == "local"
