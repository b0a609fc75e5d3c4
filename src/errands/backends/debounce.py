"""Debounced enqueues (``debounce=``, docs/flow-control.md "Time rules"): at most one queued,
not yet started job per key, whose payload and run_at each later enqueue of the key replaces.

Queries: ``debounce.sql``. The jobs noun's enqueue calls ``debounce_steps`` for each job that
carries a debounce, inside the enqueue's transaction, so a debounced job is written (or
updated) with its event in one commit, like any enqueue.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..core.states import Event
from ..errors import ConfigurationError
from .base import NewJob
from .host import EXEC, T_ENQUEUE, Step, Steps, detail, event_row
from .job_rows import insert_params

ENQUEUED = Event.ENQUEUED
DEBOUNCED = Event.DEBOUNCED


def debounce_steps(
    q: Mapping[str, str], audit: frozenset[Event], job: NewJob, now: float, actor: str
) -> Steps[int]:
    """The debounced ``job``'s write: update the key's queued job (event ``DEBOUNCED``, detail
    its new ``run_at``), or insert it when the key has none (event ``ENQUEUED``); its id."""
    rules = job.rules
    assert rules is not None and rules.debounce is not None and job.unique_key is not None
    key = job.unique_key
    while True:
        held = yield Step(q["queued_debounced"], {"debounce_key": key})
        if held is not None:  # id, type, queue, priority
            if tuple(held[1:]) != (job.type, job.queue, job.priority):
                raise ConfigurationError(
                    f"debounce: job {held[0]} queued for unique_key {key!r} is a {held[1]!r} "
                    f"in queue {held[2]!r} at priority {held[3]}, but this enqueue asks for a "
                    f"{job.type!r} in queue {job.queue!r} at priority {job.priority}; enqueue "
                    "it with the same type, queue and priority, or use another key"
                )
            params = {
                "id": held[0],
                "payload": job.payload,
                "headers": job.headers,
                "now": now,
                "debounce": rules.debounce,
                "max_wait": rules.max_wait,
            }
            row = yield Step(q["debounce_job"], params)
            if row is not None:
                if DEBOUNCED in audit:
                    info = detail(run_at=row[1])
                    event = event_row(held[0], now, DEBOUNCED, actor, info)
                    yield Step(q["insert_event"], event, EXEC)
                return int(held[0])
            continue  # claimed between the two statements: look again
        params = {**insert_params(job, now, T_ENQUEUE.target.value), "debounce_key": key}
        row = yield Step(q["insert_debounced_job"], params)
        if row is not None:
            if ENQUEUED in audit:
                yield Step(q["insert_event"], event_row(row[0], now, ENQUEUED, actor, None), EXEC)
            return int(row[0])
        # Another enqueue of the key inserted its job first (PostgreSQL): update that one.


def debounced(job: NewJob) -> bool:
    """Whether ``job`` takes the debounced write (several statements in one transaction)."""
    return job.rules is not None and job.rules.debounce is not None
