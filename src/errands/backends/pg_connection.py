"""PostgreSQL connections as errands uses them: the wrapper that sends BEGIN with the first
statement, the freshness check on checkout, session setup, and the translation of psycopg's
errors into errands' own (one line, secrets scrubbed)."""

from __future__ import annotations

import contextlib
import select
import time
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import psycopg
import psycopg.errors as pgerr
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import tuple_row
from psycopg.types.json import set_json_loads
from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolClosed, PoolTimeout

from ..errors import ConfigurationError, DatabaseBusyError, DatabaseError, QueueClosedError

# A pooled connection idle for longer than this is pinged on checkout (see Freshness); one used
# more recently is handed out without a round trip unless its socket shows the server ended it.
IDLE_PING_SECONDS = 1.0

# The worker's batch verbs must touch only the rows of the batch, through indexes: the claim
# walks jobs_due in its order and stops after :limit rows; the outcome statements look each
# job up by primary key. Right after a bulk enqueue the statistics still say "a few rows", and
# the planner then sorts every queued row on each claim (then via jobs_status_queue_type, since
# dropped) and hash-joins the batch against a scan of the whole table (measured with 20,000
# queued: 125 ms per claim of 200 instead of 0.7 ms, 64 ms per batch of successes instead of
# ~2) — a cost that grows with the table. Forbidding sorts, scans and hash/merge joins in these
# transactions leaves the planner only the index plans; one statement, set for the
# transaction only. Forbidden plans are priced at 1e10, not refused, so a statement left
# only them (a sort for the figures' key order) would cross jit_above_cost and spend ~400 ms
# compiling: JIT goes off too.
_BATCH_VERBS = frozenset({"claim", "finish"})
_BATCH_TRANSACTION = (
    "SELECT set_config('enable_sort', 'off', true), set_config('enable_seqscan', 'off', true), "
    "set_config('enable_bitmapscan', 'off', true), set_config('enable_hashjoin', 'off', true), "
    "set_config('enable_mergejoin', 'off', true), set_config('jit', 'off', true)"
)
# What opens a transaction of errands' own (_write), sent just before its first statement
# (Conn): for the batch verbs BEGIN and the planner settings in one round trip.
_BEGIN = b"BEGIN"
_BEGIN_BATCH = b"BEGIN; " + _BATCH_TRANSACTION.encode()


def begin_for(verb: str) -> bytes:
    """What opens a transaction of errands' own for this verb (PostgresBackend._write)."""
    return _BEGIN_BATCH if verb in _BATCH_VERBS else _BEGIN


def describe(url: str) -> str:
    """``host:port/dbname`` of a URL, never its password, for messages."""
    try:
        info = conninfo_to_dict(url)
    except psycopg.Error:
        return "the PostgreSQL server"
    host = info.get("host") or "localhost"
    return f"{host}:{info.get('port') or 5432}/{info.get('dbname') or info.get('user') or ''}"


def translate(exc: psycopg.Error, where: str) -> DatabaseError:
    """psycopg's errors as one line that says what to do. Transient ones (lock waits,
    serialization conflicts, a dropped connection) are DatabaseBusyError: callers retry them."""
    msg = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    if isinstance(exc, pgerr.LockNotAvailable | pgerr.QueryCanceled):
        return DatabaseBusyError(
            f"{where}: a lock stayed held past lock_timeout ({msg}); a long transaction elsewhere "
            "holds it — shorten it or raise busy_timeout"
        )
    if isinstance(exc, pgerr.SerializationFailure | pgerr.DeadlockDetected):
        return DatabaseBusyError(f"{where}: transaction conflict ({msg}); it is safe to retry")
    if isinstance(exc, PoolClosed):
        return QueueClosedError(
            f"{where}: this Queue was closed (q.close()) while still in use ({msg}); close "
            "the Queue only after its workers and producers are done"
        )
    if isinstance(exc, PoolTimeout):
        return DatabaseBusyError(
            f"{where}: no pooled connection became free in time ({msg}); the server may be "
            "down or every connection busy — check the server, or lower concurrency"
        )
    if isinstance(exc, pgerr.DiskFull):
        return DatabaseError(
            f"{where}: the server's disk is full ({msg}); free space and retry — "
            "nothing was written"
        )
    if isinstance(exc, pgerr.ReadOnlySqlTransaction):
        return DatabaseError(
            f"{where} is read-only ({msg}); point errands at the primary, not a standby"
        )
    if isinstance(exc, pgerr.InsufficientPrivilege):
        return DatabaseError(
            f"{where}: permission denied ({msg}); grant the errands user rights on its tables "
            "(or CREATE on the schema for the first migration)"
        )
    if isinstance(exc, pgerr.UndefinedTable):
        return DatabaseError(
            f"{where}: a table is missing ({msg}); was the errands schema dropped? Open a Queue "
            "on it to migrate, or restore it"
        )
    if isinstance(exc, psycopg.OperationalError) and "does not exist" in msg and "database" in msg:
        name = where.rpartition("/")[2] or "NAME"
        return DatabaseError(
            f"cannot open PostgreSQL at {where} ({msg}); create the database first, e.g. "
            f"createdb {name} (or CREATE DATABASE {name}; as a superuser), then run again"
        )
    if isinstance(exc, psycopg.OperationalError):
        return DatabaseBusyError(
            f"cannot reach PostgreSQL at {where} ({msg}); check the server is running and the "
            "URL (host, port, user, database) — the operation was not recorded and can be retried"
        )
    return DatabaseError(f"PostgreSQL error on {where}: {msg}")


def text_json(data: str | bytes) -> str:
    # JSON columns come back as text, exactly as on SQLite, so the shared verbs decode them the
    # same way (a jsonb string "ok" must not arrive already decoded).
    return data.decode() if isinstance(data, bytes) else data


class Conn:
    """The shared verbs' view of a connection: execute → a cursor; executemany (pipelined by
    psycopg). Cursors are plain tuple rows even if the application set another row factory.

    ``begin``: what opens the transaction (BEGIN, with the batch verbs' planner settings), not
    yet sent: it goes out as one simple query — one round trip — just before the first
    statement, so a transaction that runs no statement sends nothing at all. Not pipelined
    with that statement: psycopg ends a pipeline with a flush request after its sync, and a
    message arriving after the server's ReadyForQuery switches off
    idle_in_transaction_session_timeout until the next sync — a worker frozen right after
    would then hold its row locks for good (tests/backends/test_postgres.py)."""

    __slots__ = ("_begin", "_raw")

    # Statements prepared on their first run rather than psycopg's fifth (prepare_threshold):
    # the producers' hot statements, sent on any of the pool's connections; set by the backend.
    prepared: frozenset[str] = frozenset()

    def __init__(self, raw: psycopg.Connection[Any], begin: bytes = b"") -> None:
        self._raw = raw
        self._begin = begin

    @property
    def raw(self) -> psycopg.Connection[Any]:
        if self._begin:
            begin, self._begin = self._begin, b""
            self._raw.execute(begin)  # no parameters: several statements in one query
        return self._raw

    def execute(self, query: str, params: Any = None, /) -> psycopg.Cursor[Any]:
        cur = self.raw.cursor(row_factory=tuple_row)
        cur.execute(query, params or None, prepare=True if query in self.prepared else None)
        return cur

    def executemany(self, query: str, params: Any, /) -> psycopg.Cursor[Any]:
        cur = self.raw.cursor(row_factory=tuple_row)
        cur.executemany(query, params)
        return cur

    def copy(self, query: str, rows: Sequence[Sequence[Any]]) -> None:
        with self.raw.cursor().copy(query) as copy:
            for row in rows:
                copy.write_row(row)


class Freshness:
    """The pool's checkout check, without a round trip for a connection in steady use.

    A pooled connection the server ended (restart, pg_terminate_backend) must be replaced on
    checkout rather than fail the next transaction. The server says so on the socket as it
    ends the session (an error message, then end of file), so a socket with something to read
    is pinged, and fails the ping, and the pool replaces it. A connection idle in the pool for
    more than IDLE_PING_SECONDS is pinged anyway (a network path may have gone quiet). The
    rest — a connection returned moments ago with nothing to read — is handed out as is,
    instead of paying an empty query (a round trip) on every transaction.

    What is left is the race any check has: a session ended between the check and the first
    statement fails that one transaction with DatabaseBusyError ("cannot reach PostgreSQL …
    can be retried"); the pool discards the broken connection when it comes back, so the
    next call gets a working one (tests/backends/test_postgres.py)."""

    def __init__(self) -> None:
        self._returned: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()

    def returned(self, conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> None:
        """Stamp a connection as it goes back to the pool (the backend's checkout does this
        itself: a pool ``reset`` callback would cost a thread hand-off per transaction)."""
        self._returned[conn] = time.monotonic()

    def _needs_ping(self, conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> bool:
        """Never stamped, idle too long, closed, or something waiting on its socket."""
        returned = self._returned.get(conn)
        return (
            returned is None
            or time.monotonic() - returned > IDLE_PING_SECONDS
            or conn.closed
            or readable(conn)
        )

    def check(self, conn: psycopg.Connection[Any]) -> None:
        """The pool's ``check`` callback: raises if the connection is unusable."""
        if self._needs_ping(conn):
            ConnectionPool.check_connection(conn)

    async def check_async(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """``check`` for the asyncio pool (the producers' ``enqueue_async``)."""
        if self._needs_ping(conn):
            await AsyncConnectionPool.check_connection(conn)


def readable(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> bool:
    """Whether an idle connection's socket has something to read: nothing should arrive on
    an idle pooled connection but the server's goodbye (or a stray notice)."""
    if not hasattr(select, "poll"):  # Windows: no poll(); ping every time, as before
        return True
    poller = select.poll()
    poller.register(conn.fileno(), select.POLLIN | select.POLLPRI)
    return bool(poller.poll(0))


def rollback(raw: psycopg.Connection[Any]) -> None:
    """Roll back a failed transaction of our own. A connection too broken to roll back is
    left to the pool, which discards it when it comes back; the original error is the one
    that matters."""
    with contextlib.suppress(psycopg.Error):
        raw.rollback()


def configure(conn: psycopg.Connection[Any]) -> None:
    set_json_loads(text_json, conn)


async def configure_async(conn: psycopg.AsyncConnection[Any]) -> None:
    set_json_loads(text_json, conn)


def first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


class PostgresOwnTx:
    """``ctx.step(…, connection=conn)`` on PostgreSQL (docs/durable-steps.md): errands
    begins a transaction on the application's connection, the step's function writes in it,
    errands records the step fenced on the attempt (the job's row locked) and commits."""

    if TYPE_CHECKING:  # PostgresBackend's (the application's transaction, checked)

        def _user_conn(self, connection: Any) -> contextlib.AbstractContextManager[Any]: ...

    @contextlib.contextmanager
    def _own_transaction(self, connection: Any) -> Any:
        if not isinstance(connection, psycopg.Connection):
            with self._user_conn(connection):  # raises, naming what connection= must be
                pass
        if connection.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            raise ConfigurationError(
                "connection= is inside a transaction already; ctx.step(connection=…) begins "
                "and commits its own: commit or roll back yours first"
            )
        # transaction() commits at its end and rolls back if the block raises; a commit() or
        # rollback() inside it is refused by psycopg (the step's writes stay with its record).
        with connection.transaction(), self._user_conn(connection) as conn:
            yield conn
