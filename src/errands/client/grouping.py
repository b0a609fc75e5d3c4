"""Group commit: concurrent enqueue calls of one Queue share a transaction and its fsync.

On SQLite every commit waits for its own fsync and only one connection writes at a time, so
eight threads enqueueing one by one are no faster than one. Here calls that arrive while a
commit is in flight wait, and are written together in the next transaction; each returns
only once that transaction is committed — the promise of a lone ``enqueue``, one fsync
shared by many.

Leader and followers, no timer: the first caller finds nobody writing and commits at once
(a lone producer never waits for company). Callers arriving meanwhile queue up; when the
leader's commit is done it hands the lead to the first of them, which writes the whole
queue as the next group, and so on. A thread leads in its own thread (its own connection);
an asyncio task cannot block its loop, so the Queue's writer thread leads for it.

A group's transaction refused by the database (a constraint, a trigger) is rolled back and
its calls are written one by one, so only the culprit's call raises. Checks and middleware
run in each caller before it joins (client/enqueueing.py), the wake-up after it returns.
"""

from __future__ import annotations

import _thread
import asyncio
import threading
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from ..backends.base import EnqueueCall, NewJob
from ..errors import DatabaseBusyError

# Bounds one transaction's size (and so the wait of its last caller): a group closes at this
# many calls, or at the call that brings it to this many jobs (a call is never split).
MAX_GROUP_CALLS = 1000
MAX_GROUP_JOBS = 10_000

WriteGroup = Callable[[Sequence[EnqueueCall]], list[list[int]]]
WriteOne = Callable[[EnqueueCall], list[int]]


class _Waiter:
    """One call in the queue: its jobs, then its ids or its error. A thread that queues
    behind a leader blocks on ``gate`` (released once, when it is done or handed the lead; a
    leader needs none); a task on its future, which ``settle`` resolves from the writing
    thread.

    The gate is a bare lock made locked, not a threading.Event: it is made, waited on and
    opened once per call on the hot path, and an Event's Condition costs a second lock and a
    waiter list each time (8 producer threads spent ~a tenth of their CPU there)."""

    __slots__ = ("call", "done", "error", "gate", "ids", "settle")

    def __init__(self, call: EnqueueCall, settle: Callable[[], object] | None) -> None:
        self.call = call
        self.ids: list[int] | None = None
        self.error: BaseException | None = None
        self.done = False
        self.gate: Any = None  # a locked _thread.LockType while a thread waits behind a leader
        self.settle = settle

    def open(self) -> bool:
        """Let the waiting thread go on (done, or to lead); True if there was one. Once
        only: the gate is taken off before it is opened, so a second call finds none."""
        gate, self.gate = self.gate, None
        if gate is None:
            return False
        gate.release()
        return True

    def resolve(self, ids: list[int] | None, error: BaseException | None) -> None:
        self.ids, self.error, self.done = ids, error, True
        if not self.open() and self.settle is not None:
            self.settle()

    def result(self) -> list[int]:
        if self.error is not None:
            raise self.error
        assert self.ids is not None
        return self.ids


class GroupCommitter:
    """Writes concurrent enqueue calls in shared transactions (see the module's text).

    ``write_group`` writes several calls in one transaction, ``write_one`` one call in its
    own; ``spawn`` runs a function on the Queue's writer thread (for asyncio callers)."""

    def __init__(
        self,
        write_group: WriteGroup,
        write_one: WriteOne,
        spawn: Callable[[Callable[[], None]], None],
    ) -> None:
        self._write_group = write_group
        self._write_one = write_one
        self._spawn = spawn
        self._lock = threading.Lock()
        self._queue: list[_Waiter] = []
        self._leading = False  # someone is writing a group (or has been handed the lead)

    @property
    def queued(self) -> int:
        """Calls waiting for the next group (the one being written not counted)."""
        with self._lock:
            return len(self._queue)

    def enqueue(self, jobs: Sequence[NewJob], now: float, actor: str) -> list[int]:
        """Write one call's jobs, maybe with others', and return its ids once committed."""
        me = _Waiter(EnqueueCall(jobs, now, actor), None)
        with self._lock:
            self._queue.append(me)
            lead, self._leading = not self._leading, True
            if not lead:  # made before a leader can see this call
                me.gate = gate = _thread.allocate_lock()
                gate.acquire()
        if not lead:
            gate.acquire()  # until opened: done, or handed the lead
        if not me.done:  # first in, or handed the lead: still queued, write the queue
            self._lead(me)
        return me.result()

    async def enqueue_async(self, jobs: Sequence[NewJob], now: float, actor: str) -> list[int]:
        """``enqueue`` for a task: the writer thread leads, the loop never blocks."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        me = _Waiter(
            EnqueueCall(jobs, now, actor), partial(loop.call_soon_threadsafe, _settle, future)
        )
        with self._lock:
            self._queue.append(me)
            lead, self._leading = not self._leading, True
        if lead:
            self._spawn_leader()
        await future
        return me.result()

    def _spawn_leader(self) -> None:
        try:
            self._spawn(partial(self._lead, None))
        except BaseException as exc:  # the Queue is closing: nobody will write the queue
            with self._lock:
                stranded, self._queue, self._leading = self._queue, [], False
            for waiter in stranded:
                waiter.resolve(None, exc)

    def _lead(self, me: _Waiter | None) -> None:
        """Write the queue as groups. A thread leader (``me``) writes one group — its own
        call is the first — then hands the lead on and returns; the writer thread
        (``me`` None) writes until the queue is empty or hands the lead to a thread."""
        while True:
            with self._lock:
                group = _next_group(self._queue)
            try:
                self._commit(group)
            finally:  # even on KeyboardInterrupt: the queued callers must not wait forever
                go_on = self._pass_lead(me)
            if not go_on:
                return

    def _pass_lead(self, me: _Waiter | None) -> bool:
        """After a group: give the lead to the next queued call; True if the writer
        thread should go on writing the queue itself."""
        with self._lock:
            if not self._queue:
                self._leading = False
                return False
            following = self._queue[0]
        if following.open():  # a thread, queued behind the group just written
            return False  # not done: it wakes up to lead
        if me is None:
            return True
        self._spawn_leader()
        return False

    def _commit(self, group: list[_Waiter]) -> None:
        """Write a group and resolve every call in it, whatever happens."""
        try:
            if len(group) == 1:
                results = [self._write_one(group[0].call)]
            else:
                results = self._write_group([w.call for w in group])
        except DatabaseBusyError as exc:
            # Not any one call's fault, and each would wait out the busy timeout again.
            _fail(group, exc)
        except Exception as exc:
            if len(group) == 1:
                group[0].resolve(None, exc)
            else:
                self._one_by_one(group)
        except BaseException as exc:
            _fail(group, exc)
            raise
        else:
            for waiter, ids in zip(group, results, strict=True):
                waiter.resolve(ids, None)

    def _one_by_one(self, group: list[_Waiter]) -> None:
        """The group's transaction was refused: each call in a transaction of its own, so
        only the culprit's call raises (and the others' jobs are stored)."""
        for n, waiter in enumerate(group):
            try:
                ids = self._write_one(waiter.call)
            except Exception as exc:
                waiter.resolve(None, exc)
            except BaseException as exc:
                _fail(group[n:], exc)
                raise
            else:
                waiter.resolve(ids, None)


def _next_group(queue: list[_Waiter]) -> list[_Waiter]:
    """Take the next group off the front of the queue (at least one call)."""
    jobs, n = 0, 0
    for waiter in queue[:MAX_GROUP_CALLS]:
        n += 1
        jobs += len(waiter.call.jobs)
        if jobs >= MAX_GROUP_JOBS:
            break
    group = queue[:n]
    del queue[:n]
    return group


def _fail(group: list[_Waiter], exc: BaseException) -> None:
    for waiter in group:
        if not waiter.done:
            waiter.resolve(None, exc)


def _settle(future: asyncio.Future[Any]) -> None:
    if not future.done():  # the awaiting task may have been cancelled meanwhile
        future.set_result(None)
