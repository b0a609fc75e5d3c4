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
from typing import Any

from ..errors import ConfigurationError
from . import sqlite_wakeup
from .host import Conn, SQLHost

IN_TRANSACTION = (
    "connection= is inside a transaction already; ctx.step(connection=…) begins and commits "
    "its own: commit or roll back yours first"
)
ENDED = (
    "the step's function committed or rolled back connection= itself; leave that to errands "
    "(it commits the step's writes together with its record)"
)


class SQLiteOwnTx(SQLHost):
    _notifier: sqlite_wakeup.Notifier
    # The process's writes queue on it (sqlite.py's _write); re-entrant: a step may run
    # inside a step's fn.
    _writer: threading.RLock

    def _step_writer(self) -> threading.RLock:
        return self._writer

    @contextlib.contextmanager
    def _own_transaction(self, connection: Any) -> Iterator[Conn]:
        if not isinstance(connection, sqlite3.Connection):
            with self._user_conn(connection):  # raises, naming what connection= must be
                pass
        if connection.in_transaction:
            raise ConfigurationError(IN_TRANSACTION)
        with self._writer:
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
