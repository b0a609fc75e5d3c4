"""SQLite's hooks for durable steps: the wake-up after a signal, and a transaction errands
owns on the application's SQLite connection: ``ctx.step(…,
connection=conn)`` (docs/durable-steps.md). errands begins it (BEGIN IMMEDIATE: the step
holds the write lock while it runs, so its record cannot meet a busy database at commit),
the step's function writes in it, errands records the step fenced on the attempt and
commits — both or neither. PostgreSQL's twin is in pg_connection.py."""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..core.records import StepRecord
from ..errors import ConfigurationError
from . import sqlite_wakeup
from .host import Conn, SQLHost


def _result(value: Any) -> bool:
    if isinstance(value, BaseException):
        raise value
    return bool(value)


IN_TRANSACTION = (
    "connection= is inside a transaction already; ctx.step(connection=…) begins and commits "
    "its own: commit or roll back yours first"
)
ENDED = (
    "the step's function committed or rolled back connection= itself; leave that to errands "
    "(it commits the step's writes together with its record)"
)


class _StepGroup:
    """Step records of a process's handler threads waiting for one commit (one fsync)."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.pending: list[list[Any]] = []  # [record, result or None]
        self.busy = False


class SQLiteOwnTx(SQLHost):
    _notifier: sqlite_wakeup.Notifier
    # One per class is enough and needs no setup: a process rarely holds two SQLite queues,
    # and the lock is held for one short write.
    _step_lock = threading.RLock()  # re-entrant: a step may run inside a step's fn
    _step_group = _StepGroup()

    if TYPE_CHECKING:  # SQLSteps' (steps.py): one fenced record on a write's connection

        def _record(self, conn: Conn, record: StepRecord) -> int: ...

    def _step_writer(self) -> threading.RLock:
        return self._step_lock

    def record_step(self, record: StepRecord, now: float) -> bool:
        """Concurrent step records share a commit (as concurrent enqueues do: one writer,
        an fsync per commit): the first thread in writes every record waiting, each fenced
        on its own, and hands each its result; the others wait for theirs."""
        group, entry = self._step_group, [record, None]
        with group.cond:
            group.pending.append(entry)
            if group.busy:
                while entry[1] is None:
                    group.cond.wait()
                return _result(entry[1])
            group.busy = True
        try:
            while True:
                with group.cond:
                    batch, group.pending = group.pending, []
                    if not batch:
                        break
                results: list[Any]
                try:
                    with self._step_lock, self._write("record_step") as conn:
                        results = [bool(self._record(conn, r)) for r, _ in batch]
                except BaseException as exc:  # every record of the batch learns it
                    results = [exc] * len(batch)
                with group.cond:
                    for item, result in zip(batch, results, strict=True):
                        item[1] = result
                    group.cond.notify_all()
        finally:
            with group.cond:
                group.busy = False
                group.cond.notify_all()
        return _result(entry[1])

    @contextlib.contextmanager
    def _own_transaction(self, connection: Any) -> Iterator[Conn]:
        if not isinstance(connection, sqlite3.Connection):
            with self._user_conn(connection):  # raises, naming what connection= must be
                pass
        if connection.in_transaction:
            raise ConfigurationError(IN_TRANSACTION)
        with self._step_lock:
            yield from self._owned(connection)

    def _owned(self, connection: sqlite3.Connection) -> Iterator[Conn]:
        connection.execute("BEGIN IMMEDIATE")
        try:
            with self._user_conn(connection) as conn:
                yield conn
        except BaseException:
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            raise
        if not connection.in_transaction:
            raise ConfigurationError(ENDED)
        connection.execute("COMMIT")
