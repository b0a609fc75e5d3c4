"""Every backend call a worker makes goes through ``WorkerDatabase.call``, which classifies
what the database raised and counts it; the calling site then decides what to do.

Three kinds of trouble, each with one rule:

- **contention** (``DatabaseBusyError``: the write lock stayed taken past the busy
  timeout) is weather: logged at WARNING, the write retried at the next step;
- **refused** (any other error: disk full, read-only, corrupt, a trigger or constraint, a
  bug) is logged at ERROR and retried after a pause, never a crash mid-batch — leases
  recover the held jobs if it persists;
- **gone** (``DatabaseReplacedError``: the SQLite file was deleted or replaced) stops the
  worker: outcomes would go to a file nobody reads; so does ``QueueClosedError`` (the
  Queue's connections were closed under the worker): no write could ever succeed again, and
  retrying would only spin.

The counts go to the worker's registry row (``db_errors`` in total, ``db_busy`` and
``db_refused`` by kind) and so to ``/metrics``.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from ..errors import DatabaseBusyError, DatabaseError, DatabaseReplacedError, QueueClosedError
from .execution import summary

log = logging.getLogger("errands.worker")

P = ParamSpec("P")
T = TypeVar("T")


class Trouble(enum.Enum):
    CONTENTION = "busy"
    REFUSED = "refused"
    GONE = "gone"


def classify(exc: BaseException) -> Trouble:
    if isinstance(exc, DatabaseReplacedError | QueueClosedError):
        return Trouble.GONE
    if isinstance(exc, DatabaseBusyError):
        return Trouble.CONTENTION
    return Trouble.REFUSED


class WorkerDatabase:
    """The one place a worker's backend calls pass: classifies and counts their errors."""

    def __init__(self, pause: float, sleep: Callable[[float], None] = time.sleep) -> None:
        self.pause = pause  # after a refusal, so a sick database is not hammered
        self.counts: dict[Trouble, int] = dict.fromkeys(Trouble, 0)
        self._sleep = sleep
        self._lock = threading.Lock()  # ctx.heartbeat() calls from handler threads too

    def call(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """``fn(*args)``; an exception it raises is counted by kind and raised again."""
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            with self._lock:
                self.counts[classify(exc)] += 1
            raise

    def survive(self, what: str, exc: Exception, *, quiet: bool = False) -> Trouble:
        """The rule for an error ``call`` raised, at a site that carries on: a vanished
        database (or a closed Queue) is raised again (the worker stops); contention is a
        WARNING; anything else an ERROR followed by a pause. ``quiet`` sites (a read whose
        answer is only a hint) log nothing and do not pause."""
        kind = classify(exc)
        if kind is Trouble.GONE:
            raise exc
        if quiet:
            return kind
        if kind is Trouble.CONTENTION:
            log.warning("%s: %s", what, exc)
        else:
            log.error("%s: %s", what, describe(exc))
            self._sleep(self.pause)
        return kind

    @property
    def errors(self) -> int:
        return sum(self.counts.values())

    def counters(self) -> dict[str, int]:
        """For the worker's registry row (summed by ``worker_counters`` for /metrics)."""
        return {
            "db_errors": self.errors,
            "db_busy": self.counts[Trouble.CONTENTION],
            "db_refused": self.counts[Trouble.REFUSED],
        }


def describe(exc: Exception) -> str:
    """One line for the log: errands' own message, or ``Class: message`` for an error the
    driver raised."""
    return str(exc) if isinstance(exc, DatabaseError) else summary(exc).splitlines()[0]
