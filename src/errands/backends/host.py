"""What every noun's verbs stand on: the dialect hooks, the step driver, the fences.

``SQLHost`` declares the hooks a dialect (``sqlite.py``, ``postgres.py``) supplies —
connections, transactions, list and time parameters, post-commit wake-ups — and the few
helpers more than one noun uses (row mapping by column name, the hourly rollup). Each noun
(``jobs.py``, ``jobs_operator.py``, ``leader.py``, ``workers.py``, ``periodic.py``,
``retention.py``, ``stats.py``, ``schema.py``) is a mixin on this one base, so a verb reaches
only hooks declared here; ``sqlbase.SQLBackend`` puts the nouns together.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Generator, Iterator, Sequence
from typing import Any, NamedTuple, Protocol, TypeVar

from ..core import rollup
from ..core.records import to_datetime
from ..core.settings import Settings
from ..core.states import Event, single_source, transition


class Cursor(Protocol):
    rowcount: int

    @property
    def description(self) -> Any: ...
    def fetchone(self) -> Any: ...
    def fetchall(self) -> list[Any]: ...
    def __iter__(self) -> Iterator[Any]: ...


class Conn(Protocol):
    def execute(self, sql: str, params: Any = ..., /) -> Any: ...
    def executemany(self, sql: str, params: Any, /) -> Any: ...


# -- the state machine, bound once: the SQL guards compare against these ----------------------


class Fence(NamedTuple):
    """A fenced transition's guard parameters and the audit event it records."""

    params: dict[str, str]  # from_state, to_state
    event: Event


def _fence(name: str) -> Fence:
    t = transition(name)
    if t.event is None:  # every transition of the table has one; a new one must too
        raise ValueError(f"transition {name!r} has no event")
    return Fence({"from_state": single_source(name).value, "to_state": t.target.value}, t.event)


F_SUCCEED = _fence("succeed")
F_FAIL = _fence("fail")
F_RETRY_LATER = _fence("retry_later")
F_CANCEL_RUNNING = _fence("cancel_running")
F_RELEASE = _fence("release")
F_SNOOZE = _fence("snooze")
F_RECOVER = _fence("recover")
F_RECOVER_EXHAUSTED = _fence("recover_exhausted")
F_CANCEL = _fence("cancel")
F_MISS_DEADLINE = _fence("miss_deadline")  # the deadline time rule (expiry.py)
F_READY = _fence("ready")
F_CANCEL_UPSTREAM = _fence("cancel_upstream")
F_CANCEL_WAITING = _fence("cancel_waiting")
F_REVIVE = _fence("revive")
F_SLEEP = _fence("sleep")  # durable steps (steps.py)
F_PARK = _fence("park")
F_SIGNAL = _fence("signal")
T_ENQUEUE_WAITING = transition("enqueue_waiting")
UPSTREAM_FAILED = "UPSTREAM:FAILED"
RUNNING = single_source("succeed").value
T_ENQUEUE = transition("enqueue")
T_CLAIM = transition("claim")
T_RETRY = transition("retry")
LOST_CODE = "LOST:LEASE_EXPIRED"


def event_of(name: str) -> Event:
    """The audit event a transition records (``TRANSITIONS[name].event``)."""
    event = transition(name).event
    if event is None:
        raise ValueError(f"transition {name!r} has no event")
    return event


# -- steps: a write written once for blocking and asyncio connections ------------------------

WORK = "work"  # jobs became claimable (the one wake-up hook, SQLHost._woke)
DONE = "done"  # jobs became final

# A write written once as a generator of steps: each yielded Step is run by a driver, which
# sends back its result (fetchone() for ONE, fetchall() for ALL, None otherwise). ``drive`` runs
# them on a blocking connection; the PostgreSQL backend has an asyncio driver for the same steps,
# so the async producers share the sync ones' SQL and logic instead of keeping a twin.
# LAST: the statement's (last inserted id, row count), for SQLJobs.counted_inserts (SQLite).
ONE, ALL, EXEC, MANY, COPY, LAST = "one", "all", "exec", "many", "copy", "last"
T = TypeVar("T")


class Step(NamedTuple):  # a tuple: built once per row on the enqueue path, so kept cheap
    sql: str
    params: Any = None
    mode: str = ONE  # MANY: params is a list of parameter sets; COPY: a list of rows


Steps = Generator[Step, Any, T]


def drive(conn: Conn, steps: Steps[T]) -> T:
    """Run a generator of steps on a blocking connection and return its value."""
    result: Any = None
    send, execute = steps.send, conn.execute
    try:
        while True:
            sql, params, mode = send(result)
            if mode == ONE:
                result = execute(sql, params).fetchone()
            elif mode == MANY:
                conn.executemany(sql, params)
                result = None
            elif mode == COPY:
                conn.copy(sql, params)  # type: ignore[attr-defined]
                result = None
            elif mode == LAST:
                cur = execute(sql, params)
                result = (cur.lastrowid, cur.rowcount)
            else:
                cur = execute(sql, params)
                result = cur.fetchall() if mode == ALL else None
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


# -- the host ---------------------------------------------------------------------------------


class SQLHost:
    """The hooks every noun's verbs use; a dialect class overrides the ones that raise."""

    dialect: str  # names the dialect's query directory; never branched on
    # Whether another transaction can write while ours runs (PostgreSQL), so a row must be
    # locked before a decision read from others' rows (deps.py: lock_waiting). SQLite's write
    # transaction excludes every other writer: the lock would be a statement for nothing.
    concurrent_writers: bool = False
    q: dict[str, str]  # named queries (sql/<dialect>/*.sql)
    settings: Settings

    def _write(self, name: str) -> contextlib.AbstractContextManager[Conn]:
        """One write transaction named for fault injection; commits on exit."""
        raise NotImplementedError

    def _read(self) -> contextlib.AbstractContextManager[Conn]:
        raise NotImplementedError

    def _claim_rows(
        self, conn: Conn, params: dict[str, Any], now: float
    ) -> tuple[list[Any], dict[str, int]]:
        """The plain claim of unlimited jobs (jobs.py; PostgreSQL: one statement)."""
        raise NotImplementedError

    def _claim_limited(
        self, conn: Conn, request: Any, params: dict[str, Any], now: float
    ) -> tuple[list[Any], dict[str, int]]:
        """The claim of a worker with limited types (flow.py); ``request``: a ClaimRequest."""
        raise NotImplementedError

    def _handler_starts(self, conn: Conn, outcomes: Sequence[Any], held: Sequence[Any]) -> None:
        """In an outcome batch's transaction: when the rate-limited attempts' handlers really
        started (flow.py); ``held``: the ClaimedJob of each outcome."""
        raise NotImplementedError

    def _read_rows(self) -> contextlib.AbstractContextManager[Conn]:
        """A read of whole rows for people (get, lists, attempts, events): it must work on
        any row ever stored, even one an older errands wrote badly. Default: ``_read``."""
        return self._read()

    def _user_conn(self, connection: Any) -> contextlib.AbstractContextManager[Conn]:
        """The application's own connection, checked, with errors translated."""
        raise NotImplementedError

    def _list(self, values: Sequence[Any]) -> Any:
        """A list parameter as the dialect's SQL expects it (JSON text, or an array)."""
        raise NotImplementedError

    def _epoch(self, value: Any) -> float | None:
        """A timestamp column value as unix seconds."""
        raise NotImplementedError

    def _elapsed(self, start: float, end: float) -> float:
        """``end - start`` as this database subtracts the two times once stored: the figures
        a worker counts in Python equal those the SQL would read back (figures.py). SQLite
        stores the floats as given."""
        return end - start

    # -- the one wake-up hook ---------------------------------------------------------------
    # A write that made jobs claimable (WORK: retried, recovered, released by their upstream,
    # a queue resumed, a limit raised, made due or reprioritized) or final (DONE, with their
    # ids: waiters re-read them) says so inside its transaction, and the dialect tells the
    # listeners once — and only if — that transaction commits: PostgreSQL sends a NOTIFY
    # (delivered at commit, never on rollback); SQLite sends a datagram after its COMMIT
    # (sqlite_wakeup.py). An enqueue calls it too, unless the dialect's insert wakes workers
    # itself (``inserts_wake``: PostgreSQL's one-statement insert carries its NOTIFY, and
    # overlapping producers share one per burst, pg_waker.py).

    inserts_wake = False

    def _woke(self, conn: Conn, kind: str, job_ids: Sequence[int] = ()) -> None:
        """Inside a write's transaction: ``kind`` (WORK or DONE) of work appeared."""
        step = self._woke_step(kind, job_ids)
        if step is not None:
            conn.execute(step.sql, step.params)

    def _woke_step(self, kind: str, job_ids: Sequence[int] = ()) -> Step | None:
        """``_woke`` for a write written as steps (deps.py): the step to run in its
        transaction, or None when the dialect tells listeners after the commit."""
        raise NotImplementedError

    def _release(self, conn: Conn, job_ids: Sequence[int], now: float, actor: str) -> None:
        """Inside the transaction that made these jobs final: close their dependency edges
        and release (or cancel) the dependents that were waiting only for them (deps.py)."""
        raise NotImplementedError

    def _revive(self, conn: Conn, job_ids: Sequence[int], now: float, actor: str) -> None:
        """Inside a manual retry's transaction: these jobs are no longer final; the
        dependents their failure cancelled wait for them again (deps.py)."""
        raise NotImplementedError

    def _suspend(self, conn: Conn, o: Any, now: float, events: list[list[Any]], actor: str) -> bool:
        """Apply a ``Suspended`` outcome in the worker's batch (steps.py)."""
        raise NotImplementedError

    def _no_wait(self, conn: Conn, on: bool) -> contextlib.AbstractContextManager[None]:
        """While ``on``, statements on ``conn`` fail at once instead of waiting for a lock
        (SQLite: busy timeout 0). Default: nothing to change."""
        return contextlib.nullcontext()

    def _wal_bytes(self) -> int | None:
        """Bytes of write-ahead log waiting for a checkpoint, where the dialect keeps one
        in a file of its own (SQLite); None where it cannot tell (PostgreSQL)."""
        return None

    @property
    def _audit(self) -> frozenset[Event]:
        return self.settings.audit

    # -- reading rows by column name -------------------------------------------------------

    @staticmethod
    def _dicts(cur: Cursor) -> list[dict[str, Any]]:
        cols = [d[0] for d in cur.description]
        return [dict(zip(cols, row, strict=True)) for row in cur.fetchall()]

    def _fetch(self, name: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """A read query's rows as dicts keyed by column name (for the few-row reads)."""
        with self._read() as conn:
            return self._dicts(conn.execute(self.q[name], params or {}))

    def _value(self, name: str, params: dict[str, Any], column: str) -> Any:
        """One column of a one-row read (a count, a size)."""
        return self._fetch(name, params)[0][column]

    def _dt(self, value: Any) -> Any:
        return to_datetime(self._epoch(value))

    # -- the hourly rollup: a job's outcome leaving the table (pruned, or retried) -----------

    def _roll_up(self, conn: Conn, rows: Sequence[dict[str, Any]]) -> None:
        """Merge rows leaving ``jobs`` (queue, type, status, run_at, started_at, finished_at)
        into their hourly rollups: read-merge-write inside the caller's write transaction."""
        ep = self._epoch
        groups: dict[tuple[float, str, str, str], rollup.Figures] = {}
        for r in rows:
            finished = ep(r["finished_at"]) or 0.0
            key = (rollup.hour_of(finished), r["queue"], r["type"], r["status"])
            groups.setdefault(key, rollup.Figures()).add(
                *rollup.durations(ep(r["run_at"]), ep(r["started_at"]), finished)
            )
        get, put = self.q["rollup_get"], self.q["rollup_put"]
        for (hour, queue, jtype, outcome), fig in groups.items():
            ident = {"hour": hour, "queue": queue, "type": jtype, "outcome": outcome}
            found = self._dicts(conn.execute(get, ident))
            if found:
                old = found[0]
                fig = fig.merged(
                    rollup.Figures(
                        int(old["count"]),
                        float(old["wait_sum"]),
                        float(old["wait_max"]),
                        float(old["run_sum"]),
                        float(old["run_max"]),
                        rollup.load(old["wait_hist"]),
                        rollup.load(old["run_hist"]),
                    )
                )
            conn.execute(
                put,
                {
                    **ident,
                    "count": fig.count,
                    "wait_sum": fig.wait_sum,
                    "wait_max": fig.wait_max,
                    "run_sum": fig.run_sum,
                    "run_max": fig.run_max,
                    "wait_hist": rollup.dump(fig.wait_hist),
                    "run_hist": rollup.dump(fig.run_hist),
                },
            )


# -- small shared helpers ---------------------------------------------------------------------


def detail(**fields: Any) -> str:
    return json.dumps(fields, separators=(",", ":"))


def attempt_detail(attempt: int) -> str:
    return f'{{"attempt":{attempt}}}'


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def event_row(
    job_id: int, ts: float, event: Event, actor: str | None, info: str | None
) -> dict[str, Any]:
    return {"job_id": job_id, "ts": ts, "event": event.value, "actor": actor, "detail": info}


def from_json(value: Any) -> Any:
    """JSON columns: text on SQLite, already decoded (jsonb) on PostgreSQL. Text that is not
    JSON (only an older errands could have written it) is returned as it is, so the row
    stays readable."""
    if not isinstance(value, str | bytes):
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value if isinstance(value, str) else value.decode("utf-8", "replace")


def as_text(value: Any) -> str:
    """A JSON column as JSON text, whichever way the driver returned it."""
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


def iso(epoch: float | None) -> str | None:
    dt = to_datetime(epoch)
    return None if dt is None else dt.isoformat()


# A claim's column map holding this name: its rows are in the order to start them (the
# limited claim's fair turns, flow.py), not to be sorted again by priority and due time.
IN_ORDER = "in_order"  # read as this literal by jobs.py (its line budget)


def column_index(cur: Cursor) -> dict[str, int]:
    """Result column name → position, read once per statement (not per row)."""
    return {d[0]: i for i, d in enumerate(cur.description)}
