"""The PostgreSQL backend (``pip install 'errands[postgres]'``, psycopg 3).

Every verb is the shared one (``sqlbase.py``: the nouns) over the named queries in
``sql/postgres/``; this module supplies what differs: pooled autocommit connections with
explicit transactions, array and timestamp parameters, migrations serialized by an advisory
lock, LISTEN/NOTIFY wake-ups and a COPY path for bulk enqueue.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.pq import TransactionStatus
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from ..core import faults
from ..core.settings import Settings
from ..errors import ConfigurationError, DatabaseError
from . import forks, sql
from .base import Audit, Needs, NewJob
from .bulk_rows import LIMIT_KEY
from .debounce import debounced
from .host import ALL, COPY, EXEC, T_ENQUEUE, WORK, Step, Steps, drive
from .job_rows import insert_params
from .jobs import ENQUEUED
from .pg_async import AsyncPool, close_async_pool, drive_async
from .pg_claim import PostgresClaim
from .pg_connection import (
    Conn,
    Freshness,
    PostgresOwnTx,
    begin_for,
    configure,
    configure_async,
    describe,
    first_line,
    rollback,
    translate,
)
from .pg_listener import NotifyListener
from .pg_waker import Producers, Waker
from .sqlbase import SQLBackend
from .urls import scrub

log = logging.getLogger("errands.postgres")

SCHEMA_VERSION = len(sql.migrations("postgres"))
CHANNEL = "errands_jobs"  # also written out in sql/postgres/own.sql (insert_job_recorded)
# Jobs reaching a final state, for Queue.wait: a channel of its own so completions never wake
# idle workers. Payload: the ids, comma-separated, or empty when they would not fit.
FINISHED_CHANNEL = "errands_finished"
NOTIFY_PAYLOAD_MAX = 7000  # bytes; PostgreSQL refuses a payload of 8000 or more
# pg_advisory_xact_lock key for migrations: any constant; it spells "errands" in ASCII.
MIGRATION_LOCK = 0x65727261_6E6473
# From this many jobs without unique keys, enqueue_many uses COPY (measured in docs/postgres.md:
# below it, the pipelined per-row INSERT is as fast and simpler).
COPY_THRESHOLD = 64
POOL_MAX = 10

# Statements only this dialect needs (fixed text; the named queries are shared by name).
_NOTIFY = f"SELECT pg_notify('{CHANNEL}', '')"
_NOTIFY_FINISHED = f"SELECT pg_notify('{FINISHED_CHANNEL}', %s)"
# The sequence is looked up once (a MATERIALIZED CTE): inside nextval() the lookup ran for
# every row, ~2.3 us each — 45 of the 350 ms enqueue_many spent on 20,000 jobs (#26).
_NEXT_IDS = (
    "WITH jobs_sequence AS MATERIALIZED "
    "(SELECT pg_get_serial_sequence('jobs', 'id')::regclass AS name) "
    "SELECT nextval(jobs_sequence.name) FROM jobs_sequence, generate_series(1, %s)"
)
_COPY_JOBS = (
    "COPY jobs (id, queue, type, payload, status, priority, max_attempts, run_at, created_at, "
    "headers) FROM STDIN"
)
# The same with the limit columns: only a bulk that holds a limited job pays for them.
_COPY_LIMITED_JOBS = (
    "COPY jobs (id, queue, type, payload, status, priority, max_attempts, run_at, created_at, "
    "headers, limit_key, limit_group) FROM STDIN"
)
_COPY_EVENTS = "COPY job_events (job_id, ts, event, actor, detail) FROM STDIN"


# Pools inherited through os.fork(): never closed nor collected in the child (see _pool_here).
_INHERITED: list[ConnectionPool[Any]] = []


class PostgresBackend(PostgresClaim, PostgresOwnTx, SQLBackend):
    dialect = "postgres"
    q = sql.queries("postgres")
    schema_target = SCHEMA_VERSION
    concurrent_writers = True  # lock a dependent before checking it (deps.py)
    claim_resumes = True  # dead index entries of claimed jobs: skipped (claim_position.py)
    sweep_resumes = True  # and of finished jobs, by the rescuer (lease_sweep.py)
    inserts_wake = True  # its insert steps NOTIFY for due jobs (or leave it to the Waker)
    other_jobs_table_hint = "use another database, or a schema of its own (options=-csearch_path=…)"

    def __init__(self, url: str, settings: Settings, table_prefix: str | None = None) -> None:
        self.url = url
        self.settings = settings
        self.where = describe(url)
        try:
            info = conninfo_to_dict(url)
        except psycopg.ProgrammingError as exc:
            # from None: libpq's parse error may quote the URL, password and all.
            raise ConfigurationError(
                f"cannot parse the PostgreSQL URL ({scrub(str(exc), url)}); use "
                "postgresql://user:password@host:5432/dbname"
            ) from None
        # Check the server once up front, so a wrong URL fails here with libpq's own reason
        # rather than as a pool timeout later.
        try:
            psycopg.connect(url, connect_timeout=10).close()
        except psycopg.Error as exc:
            if "does not exist" in str(exc) and "database" in str(exc):
                name = self.where.rpartition("/")[2] or "NAME"
                raise DatabaseError(
                    f"cannot open PostgreSQL at {self.where} ({first_line(exc)}); create the "
                    f"database first, e.g. createdb {name} (or CREATE DATABASE {name}; in psql), "
                    "then run again"
                ) from exc
            raise DatabaseError(
                f"cannot connect to PostgreSQL at {self.where} ({scrub(first_line(exc), url)}); "
                "check the server is running and the URL's host, port, user, password and "
                "database"
            ) from exc
        self.dbname = str(info.get("dbname") or info.get("user") or "")
        lock_ms = int(settings.busy_timeout * 1000)
        # errands' own transactions last milliseconds. One left open longer belongs to a
        # worker that froze or hung mid-write: the server ends that session, so its row locks
        # (a claimed job, a leader row) cannot stall every other worker — a stale worker is
        # fenced anyway. Never applied to the application's connection= transactions.
        idle_ms = int(max(settings.lease_seconds, 1.0) * 1000)
        self._conn_kwargs: dict[str, Any] = {
            "autocommit": True,
            # Added to (not replacing) any options the URL gives, e.g. a search_path.
            "options": (
                f"{info.get('options') or ''} -c lock_timeout={lock_ms} "
                f"-c idle_in_transaction_session_timeout={idle_ms}"
            ).strip(),
            "application_name": info.get("application_name") or "errands",
        }
        # Async producers' pools, one per event loop (an asyncio pool belongs to the loop it
        # was opened on), each created on first use; see enqueue_async.
        self._apools: dict[asyncio.AbstractEventLoop, AsyncPool] = {}
        self._apools_lock = threading.Lock()
        self._afreshness = Freshness()
        self._generation = forks.generation
        # One-by-one enqueues of this process in flight, and the thread that sends one NOTIFY
        # for a burst of them (pg_waker.py: concurrent producers then share WAL flushes).
        self.producers = Producers(lambda: Waker(self.url, self._conn_kwargs, self.channel))
        self._pool = self._new_pool()
        try:
            self._use_prefix(table_prefix)
        except BaseException:
            self.close()
            raise

    def _use_prefix(self, named: str | None) -> None:
        super()._use_prefix(named)
        # The fixed statements and the channels follow the prefix too (sql.with_prefix).
        fixed = {
            "notify": _NOTIFY,
            "notify_finished": _NOTIFY_FINISHED,
            "next_ids": _NEXT_IDS,
            "copy_jobs": _COPY_JOBS,
            "copy_limited_jobs": _COPY_LIMITED_JOBS,
            "copy_events": _COPY_EVENTS,
        }
        self._fixed = {k: sql.with_prefix(self.dialect, v, self.prefix) for k, v in fixed.items()}
        self.channel = self.prefix + CHANNEL
        self.finished_channel = self.prefix + FINISHED_CHANNEL
        # The one-by-one enqueue's statements (this prefix's text), prepared on their first
        # run on each connection (Conn.prepared: every backend's of this process).
        hot = {self.q[name] for name in ("insert_job_recorded", "active_job_by_unique_key")}
        Conn.prepared = Conn.prepared | hot

    def _new_pool(self) -> ConnectionPool[psycopg.Connection[Any]]:
        self._freshness = freshness = Freshness()
        return ConnectionPool(
            self.url,
            min_size=1,
            max_size=POOL_MAX,
            kwargs=self._conn_kwargs,
            configure=configure,
            # A pooled connection the server dropped (restart, pg_terminate_backend) is
            # replaced on checkout instead of failing the next transaction (Freshness).
            check=freshness.check,
            # No reset callback: with one the pool hands every returned connection to its
            # worker thread, a thread switch per transaction (and a checkout right after may
            # find the pool empty); _checkout stamps the return itself.
            timeout=max(self.settings.busy_timeout, 1.0),
            name="errands",
            open=True,
        )

    def _pool_here(self) -> ConnectionPool[psycopg.Connection[Any]]:
        """The pool, or in a process forked after it was opened a pool of the child's own:
        the inherited one holds the parent's sessions, which the child must neither use nor
        close (psycopg never closes a connection GC'd after a fork). It is kept referenced
        so its threads' bookkeeping never runs here."""
        if forks.generation != self._generation:
            with self._apools_lock:
                if forks.generation != self._generation:
                    _INHERITED.append(self._pool)
                    self._apools = {}
                    self._pool = self._new_pool()
                    self._generation = forks.generation
        return self._pool

    # -- connections -----------------------------------------------------------------------

    @contextlib.contextmanager
    def _checkout(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection (the pool's own ``connection()``, one context manager fewer
        on every call), its return stamped for the freshness check (Freshness)."""
        pool = self._pool_here()
        raw = pool.getconn()
        try:
            with raw:  # as pool.connection(): an error rolls back, a broken one is replaced
                yield raw
        finally:
            self._freshness.returned(raw)
            pool.putconn(raw)

    @contextlib.contextmanager
    def _write(self, name: str) -> Iterator[Conn]:
        """One transaction on a pooled connection; fault points just before and after commit.
        BEGIN goes out just before the first statement (Conn), COMMIT only if one was sent."""
        try:
            with self._checkout() as raw:
                try:
                    yield Conn(raw, begin_for(name))
                    faults.point(f"{name}.before_commit")
                except BaseException:
                    rollback(raw)
                    raise
                raw.commit()  # nothing to send if no statement ran
        except psycopg.Error as exc:
            raise translate(exc, self.where) from exc
        faults.point(f"{name}.after_commit")

    @contextlib.contextmanager
    def _alone(self, name: str) -> Iterator[Conn]:
        """A write that is one statement: sent on the pooled (autocommit) connection with no
        BEGIN and no COMMIT, so the statement is its own transaction — one round trip, as the
        bare driver's single-row insert. Durable when the server answers (synchronous commit,
        as COMMIT). The fault points keep their meaning: before it nothing is written, after
        it the write is committed."""
        try:
            with self._checkout() as raw:
                faults.point(f"{name}.before_commit")
                yield Conn(raw)
        except psycopg.Error as exc:
            raise translate(exc, self.where) from exc
        faults.point(f"{name}.after_commit")

    @contextlib.contextmanager
    def _read(self) -> Iterator[Conn]:
        # Autocommit: each statement sees the latest committed snapshot.
        try:
            with self._checkout() as raw:
                yield Conn(raw)
        except psycopg.Error as exc:
            raise translate(exc, self.where) from exc

    @contextlib.contextmanager
    def _user_conn(self, connection: Any) -> Iterator[Conn]:
        """The application's own transaction: we write in it and never commit it."""
        if isinstance(connection, psycopg.AsyncConnection):
            raise ConfigurationError(
                "connection= is a psycopg.AsyncConnection: enqueue in it with "
                "`await q.enqueue_async(…, connection=conn)`"
            )
        self._check_user_conn(connection, psycopg.Connection)
        try:
            yield Conn(connection)
        except psycopg.Error as exc:
            raise translate(exc, self.where) from exc

    def _check_user_conn(self, connection: Any, kind: type[Any]) -> None:
        if not isinstance(connection, kind):
            raise ConfigurationError(
                f"connection= must be a {kind.__module__.split('.')[0]}.{kind.__name__} to "
                f"{self.where} for this Queue, got {type(connection).__name__}"
            )
        status = connection.info.transaction_status
        if status == TransactionStatus.INERROR:
            raise ConfigurationError(
                "connection= is in a failed transaction; roll it back before enqueueing"
            )
        if connection.autocommit and status == TransactionStatus.IDLE:
            raise ConfigurationError(
                "connection= is in autocommit mode outside a transaction, so the job would "
                "commit on its own; enqueue inside `with conn.transaction():`"
            )
        if connection.info.dbname != self.dbname:
            raise ConfigurationError(
                f"connection= is open on database {connection.info.dbname!r}, not this Queue's "
                f"{self.dbname!r}; enqueue in a transaction on the same database"
            )

    def close(self) -> None:
        if forks.generation != self._generation:
            return  # a forked child: the pools hold the parent's sessions (see _pool_here)
        with self._apools_lock:
            apools, self._apools = self._apools, {}
        for loop, entry in apools.items():
            if not entry.pool.closed:
                close_async_pool(loop, entry.pool)
        self.producers.close()  # sends a NOTIFY still owed first
        self.claim_position.settle(5.0)  # probes behind positions end before their pool
        self.lease_sweep.settle(5.0)
        self._pool.close()

    # -- producers --------------------------------------------------------------------------

    def enqueue(
        self,
        jobs: Sequence[NewJob],
        now: float,
        *,
        actor: str,
        connection: Any = None,
        audit: Audit | None = None,
    ) -> list[int]:
        """The shared verb, but one plain job in a transaction of our own is one statement in
        one round trip (``_alone``): own.sql's insert_job_recorded writes the job, its ENQUEUED
        event and the wake-up together (a limited job's limit columns too). An enqueue by hand
        (``audit``: its activity row) takes the shared verb's transaction, which holds both."""
        if connection is None and audit is None and len(jobs) == 1 and not debounced(jobs[0]):
            with (
                self.producers.one(jobs[0].run_at <= now) as notify,
                self._alone("enqueue") as conn,
            ):
                return drive(conn, self._insert_one_steps(jobs[0], now, actor, notify))
        return super().enqueue(jobs, now, actor=actor, connection=connection, audit=audit)

    # -- async producers --------------------------------------------------------------------

    async def enqueue_async(
        self, jobs: Sequence[NewJob], now: float, *, actor: str, connection: Any = None
    ) -> list[int]:
        """``enqueue`` on an asyncio connection: the same steps (``_insert_steps``) driven
        with ``await``, in a transaction of our own or in the application's."""
        if connection is None and len(jobs) == 1 and not debounced(jobs[0]):
            # One statement, its own transaction: one round trip (see enqueue).
            try:
                with self.producers.one(jobs[0].run_at <= now) as notify:
                    async with self._async_checkout() as raw:
                        faults.point("enqueue.before_commit")
                        steps = self._insert_one_steps(jobs[0], now, actor, notify)
                        ids = await drive_async(raw, steps)
            except psycopg.Error as exc:
                raise translate(exc, self.where) from exc
            faults.point("enqueue.after_commit")
            return ids
        return await self._write_async(self._enqueue_steps(jobs, now, actor), connection)

    async def enqueue_after_async(
        self,
        jobs: Sequence[NewJob],
        needs: Sequence[Needs | None],
        now: float,
        *,
        actor: str,
        connection: Any = None,
    ) -> list[int]:
        """``enqueue_after`` on an asyncio connection (deps.py's steps, awaited)."""
        return await self._write_async(
            self._insert_after_steps(jobs, needs, now, actor), connection
        )

    async def _write_async(self, steps: Steps[list[int]], connection: Any) -> list[int]:
        """Drive a write's steps with ``await``, in a transaction of our own or in the
        application's."""
        try:
            if connection is None:
                async with self._async_checkout() as raw, raw.transaction():
                    return await drive_async(raw, steps)
            if isinstance(connection, psycopg.Connection):
                raise ConfigurationError(
                    "connection= is a blocking psycopg.Connection: from async code pass a "
                    "psycopg.AsyncConnection, or call q.enqueue(…, connection=conn)"
                )
            self._check_user_conn(connection, psycopg.AsyncConnection)
            return await drive_async(connection, steps)
        except psycopg.Error as exc:
            raise translate(exc, self.where) from exc

    @contextlib.asynccontextmanager
    async def _async_checkout(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A connection of this loop's pool, its return stamped for the freshness check."""
        pool = await self._async_pool()
        async with pool.connection() as raw:
            try:
                yield raw
            finally:
                self._afreshness.returned(raw)

    async def _async_pool(self) -> AsyncConnectionPool[Any]:
        loop = asyncio.get_running_loop()
        with self._apools_lock:
            entry = self._apools.get(loop)
            if entry is None:
                pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
                    self.url,
                    min_size=1,
                    max_size=POOL_MAX,
                    kwargs=self._conn_kwargs,
                    configure=configure_async,
                    # As the blocking pool's: no round trip on checkout for a connection
                    # returned moments ago (Freshness), no reset callback (_async_checkout).
                    check=self._afreshness.check_async,
                    timeout=max(self.settings.busy_timeout, 1.0),
                    name="errands-async",
                    open=False,
                )
                entry = AsyncPool(pool, loop)
                self._apools[loop] = entry
        await entry.opened
        return entry.pool

    async def aclose(self) -> None:
        """Close the async pool of the running loop (``close()`` closes any left)."""
        with self._apools_lock:
            entry = self._apools.pop(asyncio.get_running_loop(), None)
        if entry is not None:
            entry.keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await entry.keeper

    def check_identity(self) -> None:
        """A server database cannot be swapped under an open connection like a file can."""

    # -- schema ----------------------------------------------------------------------------

    def _serialize_migrations(self, conn: Any) -> None:
        # Processes starting together queue up here; the first migrates, the rest find
        # nothing to do.
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))

    def _run_script(self, conn: Any, script: str) -> None:
        conn.raw.execute(script.encode())  # no parameters: '%' is literal here

    def _insert_steps(self, jobs: Sequence[NewJob], now: float, actor: str) -> Steps[list[int]]:
        if len(jobs) == 1 and not debounced(jobs[0]):
            due = jobs[0].run_at <= now
            return (yield from self._insert_one_steps(jobs[0], now, actor, due))
        if len(jobs) >= COPY_THRESHOLD and all(
            j.unique_key is None and j.rules is None for j in jobs
        ):
            ids = yield from self._copy_steps(jobs, now, actor)
        else:
            ids = yield from super()._insert_steps(jobs, now, actor)
        if any(j.run_at <= now for j in jobs):
            # Delivered at commit (or never, on rollback): listeners wake for committed jobs only.
            yield Step(self._fixed["notify"], None, EXEC)
        return ids

    def _insert_one_steps(
        self, job: NewJob, now: float, actor: str, notify: bool
    ) -> Steps[list[int]]:
        """The one-by-one enqueue: the job, its ENQUEUED event and — when ``notify`` (a due
        job, and no Waker to send it after: pg_waker.Producers) — the NOTIFY in one statement
        (own.sql) instead of three, two round trips fewer. The shared steps' unique-key path
        stays: a key held by an active job returns that job's id (and still wakes workers)."""
        params = {
            **insert_params(job, now, T_ENQUEUE.target.value),
            "event": ENQUEUED.value if ENQUEUED in self._audit else None,
            "actor": actor,
            "notify": notify,
        }
        while True:
            row = yield Step(self.q["insert_job_recorded"], params)
            if row is not None:  # one column, id
                return [row[0]]
            held = yield Step(
                self.q["active_job_by_unique_key"], {"unique_key": job.unique_key, "now": now}
            )
            if held is not None:
                if notify:
                    yield Step(self._fixed["notify"], None, EXEC)
                return [held[0]]
            # The holder finished between the two statements (each sees the latest commits):
            # the key is free again, so insert.

    def _copy_steps(self, jobs: Sequence[NewJob], now: float, actor: str) -> Steps[list[int]]:
        """Ids drawn from the identity sequence first, so COPY (which returns nothing) can
        write them and the caller still gets them in order."""
        ids = sorted(r[0] for r in (yield Step(self._fixed["next_ids"], (len(jobs),), ALL)))
        created, queued = _ts(now), T_ENQUEUE.target.value
        rows: list[tuple[Any, ...]] = [
            (
                job_id,
                j.queue,
                j.type,
                j.payload,
                queued,
                j.priority,
                j.max_attempts,
                created if j.run_at == now else _ts(j.run_at),
                created,
                j.headers,
            )
            for job_id, j in zip(ids, jobs, strict=True)
        ]
        if list(map(LIMIT_KEY, jobs)).count(None) == len(jobs):  # read in C: none limited
            yield Step(self._fixed["copy_jobs"], rows, COPY)
        else:
            limited = [(*r, j.limit_key, j.limit_group) for r, j in zip(rows, jobs, strict=True)]
            yield Step(self._fixed["copy_limited_jobs"], limited, COPY)
        event = T_ENQUEUE.event
        if event is not None and event in self._audit:
            events = [(job_id, created, event.value, actor, None) for job_id in ids]
            yield Step(self._fixed["copy_events"], events, COPY)
        return ids

    def listen(self, on_change: Callable[[], None], *, completions: bool = False) -> NotifyListener:
        # completions: not announced on this channel (waiters use listen_finished, one NOTIFY
        # per finishing transaction on a channel of its own that idle workers do not hear).
        return NotifyListener(self.url, self.where, lambda _payload: on_change(), self.channel)

    def listen_finished(self, on_finish: Callable[[frozenset[int] | None], None]) -> NotifyListener:
        def parse(payload: str | None) -> None:
            on_finish(frozenset(int(i) for i in payload.split(",")) if payload else None)

        return NotifyListener(self.url, self.where, parse, channel=self.finished_channel)

    def _woke_step(self, kind: str, job_ids: Sequence[int] = ()) -> Step | None:
        # A NOTIFY in the write's transaction: PostgreSQL delivers it at commit (never on
        # rollback) and folds identical ones within a transaction. Finished jobs go on a
        # channel of their own (waiters), with their ids when they fit; an outcome batch
        # that finished none sends nothing.
        if kind == WORK:
            return Step(self._fixed["notify"], None, EXEC)
        if not job_ids:
            return None
        payload = ",".join(map(str, job_ids))
        return Step(
            self._fixed["notify_finished"],
            (payload if len(payload) <= NOTIFY_PAYLOAD_MAX else "",),
            EXEC,
        )

    # -- dialect hooks (host.SQLHost) -----------------------------------------------------

    def _list(self, values: Sequence[Any]) -> list[Any]:
        return list(values)

    def _elapsed(self, start: float, end: float) -> float:
        # to_timestamp stores whole microseconds, and EXTRACT(EPOCH FROM …) subtracts them
        # exactly (numeric) before the float8 cast: the same, with Python's exact integers
        # and its correctly rounded int / int.
        return (_micros(end) - _micros(start)) / 1_000_000

    def _epoch(self, value: Any) -> float | None:
        if value is None:
            return None
        if isinstance(value, datetime):
            return value.timestamp()
        if isinstance(value, int | float | Decimal):
            return float(value)
        raise TypeError(f"not a timestamp: {value!r}")


def _ts(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, UTC)


# PostgreSQL's epoch (2000-01-01) in unix seconds: to_timestamp(float8) subtracts it, then
# rounds to whole microseconds with rint (half to even, as Python's round).
_PG_EPOCH = 946684800.0


def _micros(t: float) -> int:
    """The microseconds ``to_timestamp(t)`` stores, from PostgreSQL's epoch."""
    return round((t - _PG_EPOCH) * 1e6)
