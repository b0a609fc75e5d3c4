"""Filters, names and the payload key ``ctx``: one rule at every entry point, both backends.

- A filter no backend can store (a lone surrogate, a NUL; bytes that are not UTF-8 on a
  command line) gets the payload rule's one-line error: ``PayloadError`` in Python, exit 2
  from the CLI, HTTP 400 from the JSON API (the dashboard's bulk actions and job list).
- Task and queue names cannot hold a comma (commas separate names in ``--queues a,b`` and
  the workers registry), so every name a worker registers reads back as itself.
- A payload key ``ctx`` for a handler that takes ``ctx`` is refused by a producer that knows
  the task, and fails the job (INVALID_INPUT:PAYLOAD) when it was enqueued by name.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
from starlette.testclient import TestClient

import errands
from errands.backends.base import WorkerInfo
from errands.web import create_app
from helpers.support import get_job

MakeQueue = Callable[..., errands.Queue]
BAD = ["a\ud800", "\udcff", "nul\x00"]  # a lone surrogate, an undecodable byte, a NUL
JSON = {"content-type": "application/json"}


@pytest.mark.parametrize("bad", BAD, ids=["surrogate", "undecodable", "nul"])
def test_a_filter_no_backend_stores_gets_the_payload_rule(queue: errands.Queue, bad: str) -> None:
    @queue.task
    def job() -> None:
        pass

    job.enqueue()
    for name in ("type", "queue", "error_code"):
        filters: dict[str, Any] = {name: bad}
        with pytest.raises(errands.PayloadError, match=f"the {name} filter .* no backend"):
            queue.jobs(**filters)
        with pytest.raises(errands.PayloadError, match=f"the {name} filter"):
            queue.select_jobs("retry", "failed", **filters)
    assert [j.type for j in queue.jobs(type="job")] == ["job"]  # nothing else changed


def _cli(db: str, *args: str | bytes) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if k != "ERRANDS_DB"}
    return subprocess.run(
        [sys.executable, "-m", "errands", "--db", db, *args],
        env=env,
        capture_output=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    "command",
    [("jobs",), ("retry", "--status", "failed", "--yes"), ("cancel", "--status", "queued")],
    ids=lambda c: c[0],
)
def test_the_cli_refuses_an_undecodable_filter_with_exit_2(
    db_url: str, queue: errands.Queue, command: tuple[str, ...]
) -> None:
    for option in ("--type", "--queue", "--error-code"):
        r = _cli(db_url, *command, option, b"\xff")
        err = r.stderr.decode(errors="replace")
        assert r.returncode == 2, err
        assert "Traceback" not in err
        assert re.search(r"errands: argument .*: the \w+ filter .* lone surrogate", err), err


def test_the_json_api_answers_400(queue: errands.Queue) -> None:
    @queue.task
    def job() -> None:
        pass

    job.enqueue()
    with TestClient(create_app(queue), follow_redirects=False) as c:
        for action, status in (("retry", "failed"), ("cancel", "queued")):
            for name in ("type", "queue", "error_code"):
                # Valid JSON holding a lone surrogate.
                body = f'{{"status": "{status}", "{name}": "a\\ud800"}}'.encode()
                r = c.post(f"/api/admin/jobs/{action}", content=body, headers=JSON)
                assert r.status_code == 400, r.text
                assert f"the {name} filter" in r.json()["error"]
                assert "lone surrogate" in r.json()["error"]
        r = c.get("/api/admin/jobs", params={"queue": "nul\x00"})
        assert r.status_code == 400 and "NUL" in r.json()["error"]
    assert get_job(queue, queue.jobs()[0].id).status == "queued"  # nothing was changed


# -- names: no commas, so the registry reads back what was registered -----------------------


def test_commas_are_refused_in_task_and_queue_names(make_queue: MakeQueue) -> None:
    q = make_queue()
    comma = "contains a comma"

    def handler() -> None:
        pass

    with pytest.raises(errands.ConfigurationError, match=comma):
        q.task(name="a,b")(handler)
    with pytest.raises(errands.ConfigurationError, match=comma):
        q.task(queue="x,y")(handler)
    with pytest.raises(errands.ConfigurationError, match=comma):
        q.periodic(every=60, name="a,b")(handler)
    task = q.task(handler)
    with pytest.raises(errands.ConfigurationError, match=comma):
        q.enqueue("handler", {}, queue="x,y")
    with pytest.raises(errands.ConfigurationError, match=comma):
        task.with_options(queue="x,y")
    with pytest.raises(errands.ConfigurationError, match=comma):
        q.run_worker(queues=["x,y"], burst=True, handle_signals=False)
    producer = make_queue()  # no tasks: enqueues by name, for a service elsewhere
    with pytest.raises(errands.ConfigurationError, match=comma):
        producer.enqueue("a,b", {})
    with pytest.raises(errands.ConfigurationError, match=r"item 1: .*comma"):
        producer.enqueue_many([("fine", {}), ("a,b", {})])
    assert q.jobs() == []  # nothing was written


def test_unhandled_types_name_exactly_the_types_no_live_worker_handles(
    make_queue: MakeQueue,
) -> None:
    q = make_queue()
    now = q.clock()
    q.backend.register_worker(WorkerInfo("w1", "host", 1, ["x", "z"], 1, types=["a", "c"]), now)
    producer = make_queue()
    for jtype, queue_name in (("a", "x"), ("b", "x"), ("c", "y"), ("c", "z")):
        producer.enqueue(jtype, {}, queue=queue_name)
    (worker,) = q.workers()
    assert (worker["queues"], worker["types"]) == (["x", "z"], ["a", "c"])
    unhandled = {(u["queue"], u["type"]) for u in q.stats()["unhandled_types"]}
    assert unhandled == {("x", "b"), ("y", "c")}


# -- ctx: one rule whether the producer knows the task or not --------------------------------


def test_a_payload_key_ctx_is_refused_or_fails_the_job_never_dropped(
    make_queue: MakeQueue,
) -> None:
    q = make_queue()
    seen: list[Any] = []

    @q.task(max_attempts=3)
    def greet(name: str, ctx: errands.JobContext, **extra: Any) -> None:
        seen.append((name, ctx, extra))

    with pytest.raises(errands.PayloadError, match="payload key 'ctx' is reserved"):
        greet.enqueue(name="x", ctx="mine")
    with pytest.raises(errands.PayloadError, match="payload key 'ctx' is reserved"):
        q.enqueue("greet", {"name": "x", "ctx": 1})
    assert q.jobs() == []
    # Enqueued by name (another service, the CLI): the worker fails it, not retried.
    job_id = make_queue().enqueue("greet", {"name": "x", "ctx": 1})
    q.run_worker(burst=True, handle_signals=False)
    job = get_job(q, job_id)
    assert (job.status, job.error_code, job.attempts) == ("failed", "INVALID_INPUT:PAYLOAD", 1)
    assert "payload key 'ctx' is reserved" in (job.error_detail or "")
    assert seen == []  # the handler never ran with the key silently replaced

    # A handler that does not take ctx: "ctx" is an ordinary key.
    @q.task
    def plain(**kwargs: Any) -> Any:
        return kwargs

    plain_id = q.enqueue("plain", {"ctx": 1})
    q.run_worker(burst=True, handle_signals=False)
    assert get_job(q, plain_id).result == {"ctx": 1}
