"""The time rules one job was enqueued with (docs/flow-control.md), as a job carries them to
its row: float seconds each, None when not given. One value so a plain job carries one None."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TimeRules:
    """``unique_for``: how long the job's unique_key stays taken after it succeeded;
    ``debounce``: the quiet time a debounced job waits for after the latest enqueue of its key,
    and ``max_wait`` the most it waits after the first; ``expires_in``: how long after it is
    due the job may still start (else it is cancelled, ``EXPIRED:QUEUE``); ``deadline``: how
    long after its creation any attempt may still start (else it fails, ``DEADLINE:EXCEEDED``)."""

    unique_for: float | None = None
    debounce: float | None = None
    max_wait: float | None = None
    expires_in: float | None = None
    deadline: float | None = None


# The error code of a job the time rules end (docs/states.md): not started within expires_in.
EXPIRED_QUEUE = "EXPIRED:QUEUE"
# Not started, retried or woken before its deadline (created_at + deadline): failed.
DEADLINE_EXCEEDED = "DEADLINE:EXCEEDED"
