"""One job's row as the per-row inserts bind it (``insert_job``, ``insert_job_recorded``,
``insert_debounced_job``): written once for the enqueue, the dependencies noun and debounce."""

from __future__ import annotations

from typing import Any

from .base import NewJob


def insert_params(job: NewJob, now: float, to_state: str) -> dict[str, Any]:
    """``job``'s parameters, stored in ``to_state``. A queued job's start-by time
    (``expires_at``) counts from its run_at; a waiting job's is set when it is released. The
    deadline (``deadline_at``) counts from its creation, whatever its state."""
    rules = job.rules
    expires_in = None if rules is None else rules.expires_in
    deadline = None if rules is None else rules.deadline
    return {
        "queue": job.queue,
        "type": job.type,
        "payload": job.payload,
        "to_state": to_state,
        "priority": job.priority,
        "max_attempts": job.max_attempts,
        "run_at": job.run_at,
        "now": now,
        "unique_key": job.unique_key,
        "headers": job.headers,
        "limit_key": job.limit_key,
        "limit_group": job.limit_group,
        "unique_for": None if rules is None else rules.unique_for,
        "expires_in": expires_in,
        "expires_at": job.run_at + expires_in
        if expires_in is not None and to_state == "queued"
        else None,
        # Counted from created_at, which is ``now`` (the database clock the verbs are given).
        "deadline_at": None if deadline is None else now + deadline,
    }
