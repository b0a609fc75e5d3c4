"""Group commit for step records (backends/steps.py): the records of a process's concurrent
handlers share one write and one commit (one fsync, one round trip), and each handler waits
for the commit that holds its own record — so a step's record is durable before ``ctx.step``
returns, as if it had been written alone. Nothing is buffered past its caller's return.

The first handler thread in becomes the writer: it writes every record waiting, hands each
its result, and writes again while more arrived meanwhile; the others wait for their own
record's answer.
A write that raises is every waiting record's error (none of them was committed).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from . import forks

R = TypeVar("R")

# What a record waits for: its answer (True: recorded; False: the attempt is stale) or the
# error its write raised. Unset until its commit has happened.
_UNSET = object()


class _Entry(Generic[R]):
    __slots__ = ("answered", "record", "result")

    def __init__(self, record: R) -> None:
        self.record = record
        self.result: object = _UNSET
        # Its own event, so a commit wakes exactly the callers whose records it held (one
        # condition for all would wake every waiting handler at each commit).
        self.answered = threading.Event()


class StepGroup(Generic[R]):
    """The records waiting for a commit, and whether a thread is writing them."""

    def __init__(self, write: Callable[[Sequence[R]], list[bool]]) -> None:
        self._write = write  # records -> one answer each, in one transaction
        self._lock = threading.Lock()  # guards _pending, _busy, and each entry's answer
        self._pending: list[_Entry[R]] = []
        self._busy = False
        self.generation = forks.generation  # a forked child makes a group of its own

    def submit(self, record: R) -> bool:
        """Write ``record`` with whatever else is waiting; True once committed, False if
        its fence wrote nothing."""
        entry = _Entry(record)
        with self._lock:
            self._pending.append(entry)
        while True:
            with self._lock:
                if entry.result is not _UNSET:
                    return _answer(entry.result)
                lead = not self._busy
                if lead:
                    self._busy = True  # no writer (or it stopped before taking ours)
                else:
                    entry.answered.clear()  # (under the lock: no answer set meanwhile)
            if lead:
                break
            entry.answered.wait()
        try:
            self._drain()
        except BaseException:
            with self._lock:  # never leave the others waiting on a writer that is gone
                self._busy = False
                for other in self._pending:
                    other.answered.set()  # unanswered: one of them writes next
            raise
        return _answer(entry.result)

    def _drain(self) -> None:
        while True:
            with self._lock:
                batch, self._pending = self._pending, []
                if not batch:  # in the same hold as the check: no record is left behind
                    self._busy = False
                    return
            results: Sequence[object]
            try:
                results = self._write([e.record for e in batch])
            except BaseException as exc:  # every record of the batch learns it
                results = [exc] * len(batch)
            with self._lock:
                for entry, result in zip(batch, results, strict=True):
                    entry.result = result
                    entry.answered.set()


def _answer(result: object) -> bool:
    if isinstance(result, BaseException):
        raise result
    return bool(result)
