"""Enqueue options are one value (errands.EnqueueOptions, docs/architecture.md): its fields are
the option names every front door accepts — ``Queue.enqueue`` and ``enqueue_async``,
``Task.with_options``, an ``enqueue_many`` item, ``errands enqueue`` and ``POST
/api/admin/jobs`` — no more and no fewer; it is checked once when built; and every job is built
by one path, which a periodic tick of a limited task now takes too."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import inspect
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, get_type_hints

import pytest
from starlette.testclient import TestClient

import errands
from errands.cli import build_parser
from errands.core.options import NAMES, EnqueueKwargs
from errands.web import create_app
from helpers.support import FixedClock, get_job

# One value per option that a fresh queue accepts (after: a job made by the test).
SAMPLE: dict[str, Any] = {
    "queue": "mail",
    "priority": 7,
    "run_at": 1_900_000_000.0,
    "delay": None,  # not with run_at: checked on its own below
    "max_attempts": 4,
    "unique_key": "k-1",
    "after": None,  # needs a job: checked on its own below
    "on_upstream_failure": "run",
    "unique_for": 60.0,
    "debounce": 30.0,
    "max_wait": 300.0,
    "expires_in": 600.0,
    "deadline": 3600.0,
}
# What an option needs beside it to be given alone.
COMPANIONS: dict[str, dict[str, Any]] = {
    "unique_for": {"unique_key": "k-2"},
    "debounce": {"unique_key": "k-3"},
    "max_wait": {"unique_key": "k-4", "debounce": 30.0},
}


def test_the_names_are_the_fields_and_the_keyword_types_match() -> None:
    assert set(NAMES) == {f.name for f in dataclasses.fields(errands.EnqueueOptions)}
    assert set(get_type_hints(EnqueueKwargs)) == set(NAMES)
    assert set(SAMPLE) == set(NAMES)  # this test names every option


def test_checked_once_when_built_with_the_rule_named() -> None:
    for bad, message in (
        ({"priority": "high"}, "priority"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"queue": "a,b"}, "queue"),
        ({"unique_key": "\udcff"}, "unique_key"),
        ({"run_at": datetime(2030, 1, 1)}, "naive"),
        ({"run_at": 1.0, "delay": 1.0}, "run_at or delay"),
        ({"on_upstream_failure": "maybe"}, "on_upstream_failure"),
        ({"after": "3"}, "after"),
    ):
        with pytest.raises(errands.ConfigurationError, match=message):
            errands.EnqueueOptions(**bad)
    o = errands.EnqueueOptions(run_at=datetime(2030, 1, 1, tzinfo=UTC), after=[3, 3, 4])
    assert o.run_at == datetime(2030, 1, 1, tzinfo=UTC).timestamp() and o.after == (3, 4)
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.priority = 3  # type: ignore[misc]


def test_queue_enqueue_takes_exactly_the_option_names(queue: errands.Queue) -> None:
    keywords = {
        name
        for name, p in inspect.signature(errands.Queue.enqueue).parameters.items()
        if p.kind is p.KEYWORD_ONLY
    }
    # the options come as **kwargs
    assert keywords == {"options", "connection", "actor", "by_hand"}
    up = queue.enqueue("t", {})
    for name, value in SAMPLE.items():
        value = {"after": [up], "delay": 5}.get(name, value)
        one: Any = {name: value, **COMPANIONS.get(name, {})}
        job_id = queue.enqueue("t", {"n": name}, **one)
        job = get_job(queue, job_id)
        if name in {"queue", "priority", "max_attempts", "unique_key", "unique_for", "expires_in"}:
            assert getattr(job, name) == value
    with pytest.raises(errands.ConfigurationError, match=r"unknown option\(s\) dealy.*delay"):
        queue.enqueue("t", {}, dealy=5)  # type: ignore[call-arg]


def test_an_options_value_with_keywords_over_it(queue: errands.Queue) -> None:
    mail = errands.EnqueueOptions(queue="mail", priority=3)
    a = get_job(queue, queue.enqueue("t", {}, options=mail))
    b = get_job(queue, queue.enqueue("t", {}, options=mail, priority=9))
    assert (a.queue, a.priority) == ("mail", 3) and (b.queue, b.priority) == ("mail", 9)
    c = get_job(queue, asyncio.run(queue.enqueue_async("t", {}, options=mail, max_attempts=2)))
    assert (c.queue, c.priority, c.max_attempts) == ("mail", 3, 2)
    with pytest.raises(errands.ConfigurationError, match="options= takes an errands"):
        queue.enqueue("t", {}, options={"queue": "mail"})  # type: ignore[arg-type]
    ids = queue.enqueue_many([("t", {}, mail), ("t", {}, {"priority": 1})])
    assert [get_job(queue, i).priority for i in ids] == [3, 1]


def test_task_with_options_takes_the_names_and_connection(queue: errands.Queue) -> None:
    @queue.task
    def greet(name: str) -> None: ...

    bound = greet.with_options(priority=2).with_options(queue="vip", delay=timedelta(0))
    job = get_job(queue, bound.enqueue(name="a"))
    assert (job.queue, job.priority) == ("vip", 2)
    for name, value in SAMPLE.items():
        if value is not None:
            greet.with_options(**{name: value, **COMPANIONS.get(name, {})})
    with pytest.raises(errands.ConfigurationError, match=r"unknown option.*with_options"):
        greet.with_options(prio=1)


def test_errands_enqueue_has_a_flag_per_option(queue: errands.Queue) -> None:
    sub = next(
        a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)
    ).choices["enqueue"]
    dests = {a.dest for a in sub._actions if a.option_strings} - {
        "help",
        "payload",
        "create",
        "db",
        "json",
    }
    assert dests == set(NAMES)
    url = queue.url
    out = subprocess.run(
        [sys.executable, "-m", "errands", "enqueue", "t", "--db", url, "--json",
         "--run-at", "2030-01-01T00:00:00+00:00", "--priority", "4", "--queue", "mail"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    job = get_job(queue, int(out.split(":")[1].strip(" }\n")))
    assert job.priority == 4 and job.queue == "mail"
    assert job.run_at == datetime(2030, 1, 1, tzinfo=UTC)
    bad = subprocess.run(
        [sys.executable, "-m", "errands", "enqueue", "t", "--db", url,
         "--run-at", "2030-01-01T00:00:00", ],
        capture_output=True, text=True,
    )  # fmt: skip
    assert bad.returncode == 2 and "naive" in bad.stderr


def test_post_api_admin_jobs_takes_the_option_names(queue: errands.Queue) -> None:
    c = TestClient(create_app(queue))
    up = queue.enqueue("t", {})
    for name, value in SAMPLE.items():
        value = {"after": [up], "delay": 5, "run_at": "2030-01-01T00:00:00Z"}.get(name, value)
        body = {"type": "t", "payload": {"n": 1}, name: value, **COMPANIONS.get(name, {})}
        r = c.post("/api/admin/jobs", json=body)
        assert r.status_code == 201, (name, r.text)
        job = get_job(queue, r.json()["id"])
        assert job.payload == {"n": 1}
        assert queue.events(job.id)[0].actor == "api"
        if name == "run_at":
            assert job.run_at == datetime(2030, 1, 1, tzinfo=UTC)
    for body, message in (
        ({"type": "t", "dealy": 5}, "unknown option"),
        ({"payload": {}}, '"type" is required'),
        ({"type": "t", "priority": "high"}, "priority"),
        ({"type": "t", "run_at": "tomorrow"}, "ISO 8601"),
    ):
        r = c.post("/api/admin/jobs", json=body)
        assert r.status_code == 400 and message in r.json()["error"], r.text
    # A mutation like any other: refused without the JSON content type (CSRF).
    r = c.post("/api/admin/jobs", content=b'{"type": "t"}')
    assert r.status_code == 403


def test_a_periodic_tick_of_a_limited_task_carries_its_limit(
    make_queue: Callable[..., errands.Queue],
) -> None:
    clock = FixedClock()
    q = make_queue(clock=clock)

    @q.periodic(every=60, limit=errands.Limit("smtp", running=1, group="region"),
                payload={"region": "eu"})  # fmt: skip
    def digest(region: str) -> None: ...

    from errands.maintenance.scheduler import PeriodicScheduler

    clock.advance(61)
    report = PeriodicScheduler(q.backend, q.schedules, q.tasks, clock=clock).run_once(clock())
    job = get_job(q, report.enqueued["digest"])
    assert (job.limit_key, job.limit_group) == ("smtp", "eu")


def test_a_bulk_of_a_limited_type_writes_each_group_with_its_row(queue: errands.Queue) -> None:
    @queue.task(limit=errands.Limit("api", running=2, group="tenant"))
    def call(tenant: Any = None) -> None: ...

    # Large enough for PostgreSQL's COPY path too (backends/postgres.py COPY_THRESHOLD).
    bulk = queue.enqueue_many([("call", {"tenant": n % 3}) for n in range(600)])
    assert {(get_job(queue, i).limit_key, get_job(queue, i).limit_group) for i in bulk[-3:]} == {
        ("api", "0"),
        ("api", "1"),
        ("api", "2"),
    }
    ids = queue.enqueue_many([("call", {"tenant": t}) for t in ("a", "b", 3, None)])
    assert [(get_job(queue, i).limit_key, get_job(queue, i).limit_group) for i in ids] == [
        ("api", "a"),
        ("api", "b"),
        ("api", "3"),
        ("api", ""),
    ]

    @queue.task
    def t() -> None: ...

    plain = get_job(queue, queue.enqueue("t", {}))
    assert (plain.limit_key, plain.limit_group) == (None, None)
