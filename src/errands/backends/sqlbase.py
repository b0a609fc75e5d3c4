"""The domain verbs, written once over named queries.

Both dialects keep queries of the same names (``sql/<dialect>/*.sql``) whose RETURNING and
SELECT column orders match, so the logic here — fencing, which rows go with which outcome,
audit events — is shared; a dialect supplies only connections, transactions, list and time
parameters, migrations and its wake-up listener (as Oban's Lite engine reuses the Postgres one).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from operator import attrgetter
from typing import Any, NamedTuple, Protocol, TypeVar

from ..errors import SchemaConflictError, SchemaVersionError
from ..records import Attempt, EventRecord, Job, to_datetime
from ..settings import Settings
from ..states import AttemptStatus, Event, single_source, transition
from . import batch_figures
from . import sql as sql_files
from .base import (
    Cancelled,
    CancelReport,
    ClaimedJob,
    ClaimRequest,
    Failed,
    JobFilter,
    Listener,
    NewJob,
    Outcome,
    Released,
    RescueReport,
    Retried,
    Succeeded,
    WorkerInfo,
)


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


def _fence(name: str) -> dict[str, str]:
    return {"from_state": single_source(name).value, "to_state": transition(name).target.value}


# Bound once from the state machine: the SQL guards compare against these.
F_SUCCEED = _fence("succeed")
F_FAIL = _fence("fail")
F_RETRY_LATER = _fence("retry_later")
F_CANCEL_RUNNING = _fence("cancel_running")
F_RELEASE = _fence("release")
F_RECOVER = _fence("recover")
F_RECOVER_EXHAUSTED = _fence("recover_exhausted")
F_CANCEL = _fence("cancel")
RUNNING = single_source("succeed").value
T_ENQUEUE = transition("enqueue").target.value
T_CLAIM = transition("claim").target.value
T_RETRY = transition("retry")
LOST_CODE = "LOST:LEASE_EXPIRED"


def detail(**fields: Any) -> str:
    return json.dumps(fields, separators=(",", ":"))


def _attempt_detail(attempt: int) -> str:
    return f'{{"attempt":{attempt}}}'


# A write written once as a generator of steps: each yielded Step is run by a driver, which
# sends back its result (fetchone() for ONE, fetchall() for ALL, None otherwise). ``drive`` runs
# them on a blocking connection; the PostgreSQL backend has an asyncio driver for the same steps,
# so the async producers share the sync ones' SQL and logic instead of keeping a twin.
ONE, ALL, EXEC, MANY, COPY = "one", "all", "exec", "many", "copy"
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
            else:
                cur = execute(sql, params)
                result = cur.fetchall() if mode == ALL else None
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


class SQLBackend:
    """Shared verbs. Subclasses provide ``q`` (named queries) and the hooks below."""

    dialect: str
    q: dict[str, str]
    settings: Settings
    schema_target: int  # the schema version this errands writes

    # -- dialect hooks ---------------------------------------------------------------------

    def _write(self, name: str) -> contextlib.AbstractContextManager[Conn]:
        """One write transaction named for fault injection; commits on exit."""
        raise NotImplementedError

    def _read(self) -> contextlib.AbstractContextManager[Conn]:
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

    def listen(self, on_change: Callable[[], None], *, completions: bool = False) -> Listener:
        """Call ``on_change`` (from another thread) soon after another connection commits
        jobs; with ``completions``, after outcomes are recorded too (where the dialect can tell:
        SQLite; PostgreSQL wakes for enqueues only)."""
        raise NotImplementedError

    def _roll_up(self, conn: Conn, rows: Sequence[Any]) -> None:
        """Merge finished-job rows into job_stats_hourly (OpsVerbs supplies it)."""
        raise NotImplementedError

    def listen_finished(self, on_finish: Callable[[frozenset[int] | None], None]) -> Listener:
        """Call ``on_finish`` when jobs reach a final state (with their ids, or None when the
        dialect cannot tell which): what ``Queue.wait`` sleeps on."""
        raise NotImplementedError

    def _finished(self, conn: Conn, job_ids: Sequence[int]) -> None:
        """Inside the transaction that made these jobs final: tell waiters (PostgreSQL: one
        NOTIFY per transaction; SQLite's listeners see every commit anyway)."""

    # -- schema ----------------------------------------------------------------------------

    where: str  # how messages name the database: a file path, or host:port/dbname
    other_jobs_table_hint: str = "use another database for errands"

    def _serialize_migrations(self, conn: Conn) -> None:
        """Make concurrent migrators queue up (SQLite's BEGIN IMMEDIATE already does)."""

    def _run_script(self, conn: Conn, script: str) -> None:
        raise NotImplementedError

    def migrate(self) -> None:
        """Apply pending migrations in one transaction; safe when many processes race here
        (the first applies them, the rest find nothing to do). A database written by a newer
        errands, or holding an object under a name errands needs, is refused untouched.
        The schema version lives only in ``errands_migrations``: never in the database's
        header (SQLite's ``user_version`` and ``application_id`` belong to the application)."""
        q = self.q
        if self._schema_is_current():
            return  # the common case: opening a queue needs no write lock
        with self._write("migrate") as conn:
            self._serialize_migrations(conn)
            if conn.execute(q["schema_table_exists"], {}).fetchone() is None:
                self._refuse_conflicts(conn)
                conn.execute(q["create_schema_table"], {})
            current = int(conn.execute(q["schema_version"], {}).fetchone()[0])
            self._refuse_newer(current)
            for version, script in sql_files.migrations(self.dialect):
                if version <= current:
                    continue
                self._run_script(conn, script)
                conn.execute(q["record_migration"], {"version": version, "now": time.time()})

    def _refuse_newer(self, current: int) -> None:
        if current > self.schema_target:
            raise SchemaVersionError(
                f"{self.where} has errands schema version {current}, newer than this errands "
                f"supports ({self.schema_target}); upgrade errands (pip install -U errands) "
                "— nothing was changed"
            )

    def _refuse_conflicts(self, conn: Conn) -> None:
        """A database errands has never migrated must not already use a name errands' own
        migrations create: CREATE would fail half-way, or errands would read the
        application's table as its own."""
        names = [name for _, name in sql_files.created_objects(self.dialect)]
        rows = conn.execute(self.q["conflicting_objects"], {"names": self._list(names)})
        found = [f"{kind} '{name}'" for kind, name in rows.fetchall()]
        if found:
            raise SchemaConflictError(
                f"{self.where} already has {', '.join(found)}, which errands did not create "
                f"and needs the name{'s' if len(found) > 1 else ''} of; "
                f"{self.other_jobs_table_hint} — nothing was changed"
            )

    def schema_version(self) -> int:
        with self._read() as conn:
            return int(conn.execute(self.q["schema_version"], {}).fetchone()[0])

    def _schema_is_current(self) -> bool:
        """Opening a queue whose schema is up to date needs only a read: no write lock, so a
        worker can start while a long transaction holds the database."""
        with self._read() as conn:
            if conn.execute(self.q["schema_table_exists"], {}).fetchone() is None:
                return False
            version = conn.execute(self.q["schema_version"], {}).fetchone()[0]
        return bool(version == self.schema_target)

    @property
    def _audit(self) -> frozenset[Event]:
        return self.settings.audit

    # -- row mapping -----------------------------------------------------------------------

    @staticmethod
    def _dicts(cur: Cursor) -> list[dict[str, Any]]:
        cols = [d[0] for d in cur.description]
        return [dict(zip(cols, row, strict=True)) for row in cur.fetchall()]

    def _dt(self, value: Any) -> Any:
        return to_datetime(self._epoch(value))

    def _job(self, r: dict[str, Any]) -> Job:
        dt = self._dt
        return Job(
            id=r["id"],
            queue=r["queue"],
            type=r["type"],
            payload=_json(r["payload"]),
            status=r["status"],
            priority=r["priority"],
            attempts=r["attempts"],
            max_attempts=r["max_attempts"],
            run_at=dt(r["run_at"]),
            created_at=dt(r["created_at"]),
            started_at=dt(r["started_at"]),
            finished_at=dt(r["finished_at"]),
            worker_id=r["worker_id"],
            heartbeat_at=dt(r["heartbeat_at"]),
            lease_expires_at=dt(r["lease_expires_at"]),
            unique_key=r["unique_key"],
            error_code=r["error_code"],
            error_detail=r["error_detail"],
            result=_json(r["result"]),
            payload_ref=r["payload_ref"],
            result_ref=r["result_ref"],
            cancel_requested=bool(r["cancel_requested"]),
            headers=_json(r.get("headers")),
        )

    # -- enqueue ---------------------------------------------------------------------------

    def enqueue(
        self, jobs: Sequence[NewJob], now: float, *, actor: str, connection: Any = None
    ) -> list[int]:
        if connection is None:
            with self._write("enqueue") as conn:
                return self._insert(conn, jobs, now, actor)
        with self._user_conn(connection) as conn:
            return self._insert(conn, jobs, now, actor)

    def _insert(self, conn: Conn, jobs: Sequence[NewJob], now: float, actor: str) -> list[int]:
        return drive(conn, self._insert_steps(jobs, now, actor))

    def _insert_steps(self, jobs: Sequence[NewJob], now: float, actor: str) -> Steps[list[int]]:
        """The enqueue write as steps, so the same code runs on a blocking connection
        (``drive``) and on an asyncio one (the PostgreSQL backend's ``enqueue_async``)."""
        if len(jobs) > 1 and all(j.unique_key is None and j.headers is None for j in jobs):
            # Many plain jobs: one statement per chunk (a per-row INSERT costs ~5x more in the
            # driver than the row costs in the database). Unique keys need the per-row check,
            # and headers (middleware) are written per row.
            return (yield from self._insert_batched_steps(jobs, now, actor))
        ids: list[int] = []
        events: list[dict[str, Any]] = []
        insert, existing = self.q["insert_job"], self.q["active_job_by_unique_key"]
        for job in jobs:
            row = yield Step(
                insert,
                {
                    "queue": job.queue,
                    "type": job.type,
                    "payload": job.payload,
                    "to_state": T_ENQUEUE,
                    "priority": job.priority,
                    "max_attempts": job.max_attempts,
                    "run_at": job.run_at,
                    "now": now,
                    "unique_key": job.unique_key,
                    "headers": job.headers,
                },
            )
            if row is None:  # an active job holds this unique_key
                ids.append((yield Step(existing, {"unique_key": job.unique_key}))[0])
            else:
                ids.append(row[0])
                events.append(_event_row(row[0], now, Event.ENQUEUED, actor, None))
        if events and Event.ENQUEUED in self._audit:
            if len(events) == 1:  # the one-by-one enqueue: executemany costs more for one row
                yield Step(self.q["insert_event"], events[0], EXEC)
            else:
                yield Step(self.q["insert_event"], events, MANY)
        return ids

    def _insert_batched_steps(
        self, jobs: Sequence[NewJob], now: float, actor: str
    ) -> Steps[list[int]]:
        """Many jobs, one statement per chunk, and one for the chunk's ENQUEUED events."""
        ids: list[int] = []
        q = self.q
        for chunk in _chunks(jobs):
            batch = _dumps(
                [[j.queue, j.type, j.payload, j.priority, j.max_attempts, j.run_at] for j in chunk]
            )
            rows = yield Step(
                q["insert_jobs"], {"batch": batch, "to_state": T_ENQUEUE, "now": now}, ALL
            )
            new = sorted(r[0] for r in rows)
            if len(new) != len(chunk):  # cannot happen without unique keys; never guess ids
                raise RuntimeError(f"inserted {len(new)} of {len(chunk)} jobs")
            ids.extend(new)
            if Event.ENQUEUED in self._audit:
                params = {
                    "job_ids": _dumps(new),
                    "now": now,
                    "event": Event.ENQUEUED.value,
                    "actor": actor,
                }
                yield Step(q["insert_enqueued_events"], params, EXEC)
        return ids

    # -- worker verbs ----------------------------------------------------------------------

    def claim(self, request: ClaimRequest, now: float) -> list[ClaimedJob]:
        if not request.types or request.limit <= 0:
            return []
        with self._write("claim") as conn:
            rows = self._claim_in(conn, request, now)
        return self._claimed(rows)

    def _claim_in(self, conn: Conn, request: ClaimRequest, now: float) -> list[Any]:
        if not request.types or request.limit <= 0:
            return []
        params = {
            "to_state": T_CLAIM,
            "worker_id": request.worker_id,
            "now": now,
            "lease_seconds": request.lease_seconds,
            "types": self._list(list(request.types)),
            "queues": None if request.queues is None else self._list(list(request.queues)),
            "limit": request.limit,
        }
        rows: list[Any] = conn.execute(self.q["claim"], params).fetchall()
        if rows:
            running = AttemptStatus.RUNNING.value
            ids = _dumps([r[0] for r in rows])
            conn.execute(self.q["open_attempts"], {"job_ids": ids, "now": now, "status": running})
            if Event.CLAIMED in self._audit:
                params = {"job_ids": ids, "now": now, "event": Event.CLAIMED.value}
                conn.execute(self.q["insert_claimed_events"], params)
        return rows

    def _claimed(self, rows: list[Any]) -> list[ClaimedJob]:
        ep = self._epoch
        jobs = [
            ClaimedJob(
                r[0],
                r[1],
                r[2],
                _text(r[3]),
                r[4],
                r[5],
                r[6],
                ep(r[7]) or 0.0,
                ep(r[8]) or 0.0,
                bool(r[9]),
                None if r[10] is None else _text(r[10]),
            )
            for r in rows
        ]
        if len({j.priority for j in jobs}) > 1:
            jobs.sort(key=lambda j: (-j.priority, j.run_at, j.id))
        else:  # the common case, one priority: a C key instead of a lambda per job
            jobs.sort(key=attrgetter("run_at", "id"))
        return jobs

    def finish(self, outcomes: Sequence[Outcome], worker_id: str, now: float) -> list[bool]:
        """Record outcomes of attempts this worker holds, in one transaction.

        Each is fenced on (job id, attempt, status='running'); the returned flags say which
        applied. A refused one (the lease was recovered and the job moved on) changes nothing.
        Successes — the hot path — go in one batched statement; the rest one by one.
        """
        with self._write("finish") as conn:
            return self._finish_in(conn, outcomes, worker_id, now)

    def finish_and_claim(
        self, outcomes: Sequence[Outcome], worker_id: str, request: ClaimRequest, now: float
    ) -> tuple[list[bool], list[ClaimedJob]]:
        """``finish`` then ``claim`` in one transaction: one commit (one fsync with SQLite's
        synchronous=FULL, one WAL flush on PostgreSQL) per batch instead of two. All or
        nothing: if the claim fails, the outcomes are not recorded either."""
        with self._write("finish") as conn:
            applied = self._finish_in(conn, outcomes, worker_id, now)
            rows = self._claim_in(conn, request, now)
        return applied, self._claimed(rows)

    def _finish_in(
        self, conn: Conn, outcomes: Sequence[Outcome], worker_id: str, now: float
    ) -> list[bool]:
        attempts: list[list[Any]] = []
        events: list[list[Any]] = []
        succeeded = [o for o in outcomes if isinstance(o, Succeeded)]
        done: set[tuple[int, int]] = set()
        other: dict[int, bool] = {}
        if succeeded:
            done = self._succeed(conn, succeeded, worker_id, now)
        for i, o in enumerate(outcomes):
            if not isinstance(o, Succeeded):
                other[i] = self._apply(conn, o, now, attempts, events, worker_id)
        applied = [
            (o.job_id, o.attempt) in done if isinstance(o, Succeeded) else other[i]
            for i, o in enumerate(outcomes)
        ]
        if Event.STARTED in self._audit:
            events.extend(
                [o.job_id, o.started_at, "STARTED", worker_id, _attempt_detail(o.attempt)]
                for o, ok in zip(outcomes, applied, strict=True)
                if ok and not isinstance(o, Released)
            )
        self._write_rows(conn, attempts, events, now)
        final = [
            o.job_id
            for o, ok in zip(outcomes, applied, strict=True)
            if ok and not isinstance(o, (Released, Retried))
        ]
        if final:
            self._finished(conn, final)
        # The dialect's _write("finish") marked this transaction: the triggers stand aside
        # and the batch counts its own figures (batch_figures.py).
        ended = _ended(outcomes, applied)
        unsuccessful = [o.job_id for o in ended if not isinstance(o, Succeeded)]
        batch_figures.count(conn, self.q, [o.job_id for o in ended], unsuccessful)
        return applied

    def _succeed(
        self, conn: Conn, succeeded: Sequence[Succeeded], worker_id: str, now: float
    ) -> set[tuple[int, int]]:
        """The hot path: every success of a batch in three statements sharing one JSON
        parameter (the fenced update, the attempt rows, the audit events)."""
        q = self.q
        batch = [[o.job_id, o.attempt, o.started_at, o.result] for o in succeeded]
        text = _dumps(batch)
        rows = conn.execute(q["succeed_jobs"], {**F_SUCCEED, "now": now, "batch": text}).fetchall()
        done = {(r[0], r[1]) for r in rows}
        if not done:
            return done
        if len(done) < len(batch):  # some were refused: only the applied ones get their rows
            text = _dumps([b for b in batch if (b[0], b[1]) in done])
        status = AttemptStatus.SUCCEEDED.value
        conn.execute(q["close_succeeded_attempts"], {"now": now, "batch": text, "status": status})
        if Event.SUCCEEDED in self._audit:
            params = {"now": now, "batch": text, "event": Event.SUCCEEDED.value, "actor": worker_id}
            conn.execute(q["insert_succeeded_events"], params)
        return done

    def complete_in(self, connection: Any, outcome: Succeeded, worker_id: str, now: float) -> bool:
        """Transactional completion: the fenced success, written in the application's own
        open transaction (never committed here)."""
        attempts: list[list[Any]] = []
        events: list[list[Any]] = []
        with self._user_conn(connection) as conn:
            if not self._apply(conn, outcome, now, attempts, events, worker_id):
                return False
            self._write_rows(conn, attempts, events, now)
            self._finished(conn, [outcome.job_id])
        return True

    def _write_rows(
        self, conn: Conn, attempts: list[list[Any]], events: list[list[Any]], now: float
    ) -> None:
        """The attempt-row updates and audit events that go with applied outcomes."""
        if attempts:
            conn.execute(self.q["close_attempts"], {"now": now, "batch": _dumps(attempts)})
        audit = self._audit
        rows = [e for e in events if e[2] in audit]
        if rows:
            conn.execute(self.q["insert_events"], {"rows": _dumps(rows)})

    def _apply(
        self,
        conn: Conn,
        o: Outcome,
        now: float,
        attempts: list[list[Any]],
        events: list[list[Any]],
        actor: str,
    ) -> bool:
        """Apply one fenced outcome; queue the attempt row and event that go with it."""
        q = self.q
        key = {"job_id": o.job_id, "attempt": o.attempt}
        if isinstance(o, Released):  # handed back unstarted: the attempt never happened
            if conn.execute(q["release_job"], {**key, **F_RELEASE}).rowcount != 1:
                return False
            conn.execute(q["delete_attempt"], key)
            events.append([o.job_id, now, "RELEASED", actor, _attempt_detail(o.attempt)])
            return True
        if isinstance(o, Succeeded):
            batch = _dumps([[o.job_id, o.attempt, o.started_at, o.result]])
            if not conn.execute(
                q["succeed_jobs"], {**F_SUCCEED, "now": now, "batch": batch}
            ).fetchall():
                return False
            attempts.append([o.job_id, o.attempt, "succeeded", o.started_at, None, None, None])
            events.append([o.job_id, now, "SUCCEEDED", actor, _attempt_detail(o.attempt)])
            return True
        base = {
            **key,
            "now": now,
            "started_at": o.started_at,
            "error_code": o.error_code,
            "error_detail": o.error_detail,
        }
        ref = None
        if isinstance(o, Cancelled):
            cur = conn.execute(q["cancel_running_job"], {**base, **F_CANCEL_RUNNING})
            status, event, info = AttemptStatus.CANCELLED, "CANCELLED", _attempt_detail(o.attempt)
        else:
            if isinstance(o, Failed):
                cur = conn.execute(q["fail_job"], {**base, **F_FAIL})
                event, info = "FAILED", detail(attempt=o.attempt, error_code=o.error_code)
            else:
                params = {**base, **F_RETRY_LATER, "retry_at": o.retry_at}
                cur = conn.execute(q["schedule_retry"], params)
                event = "RETRY_SCHEDULED"
                info = detail(
                    attempt=o.attempt, error_code=o.error_code, delay=round(o.retry_delay, 3)
                )
            status = AttemptStatus.FAILED
            if cur.rowcount == 1 and o.traceback:
                blob = {"job_id": o.job_id, "kind": "traceback", "body": o.traceback, "now": now}
                ref = f"blob:{conn.execute(q['insert_blob'], blob).fetchone()[0]}"
        if cur.rowcount != 1:
            return False
        attempts.append(
            [o.job_id, o.attempt, status.value, o.started_at, o.error_code, o.error_detail, ref]
        )
        events.append([o.job_id, now, event, actor, info])
        return True

    def heartbeat(
        self, worker_id: str, held: Sequence[tuple[int, int]], lease_seconds: float, now: float
    ) -> list[bool]:
        if not held:
            return []
        out: list[bool] = []
        base = {
            "from_state": RUNNING,
            "worker_id": worker_id,
            "now": now,
            "lease_seconds": lease_seconds,
        }
        with self._write("heartbeat") as conn:
            for job_id, attempt in held:
                cur = conn.execute(
                    self.q["heartbeat"], {**base, "job_id": job_id, "attempt": attempt}
                )
                out.append(cur.rowcount == 1)
            if Event.HEARTBEAT in self._audit:
                rows = [
                    _event_row(j, now, "HEARTBEAT", worker_id, None)
                    for (j, _), ok in zip(held, out, strict=True)
                    if ok
                ]
                if rows:
                    conn.executemany(self.q["insert_event"], rows)
        return out

    def cancel_requested(self, job_ids: Sequence[int]) -> list[int]:
        if not job_ids:
            return []
        with self._read() as conn:
            cur = conn.execute(self.q["cancel_requested"], {"job_ids": self._list(list(job_ids))})
            return [r[0] for r in cur.fetchall()]

    def next_due(self, types: Sequence[str], queues: Sequence[str] | None) -> float | None:
        if not types:
            return None
        params = {
            "types": self._list(list(types)),
            "queues": None if queues is None else self._list(list(queues)),
        }
        with self._read() as conn:
            row = conn.execute(self.q["next_due"], params).fetchone()
        return None if row is None else self._epoch(row[0])

    # -- maintenance -----------------------------------------------------------------------

    def rescue(self, now: float, *, limit: int = 1000) -> RescueReport:
        """Recover running jobs whose lease expired: attempt → lost, job → queued (attempts
        left) or failed (that was the last one)."""
        with self._write("rescue") as conn:
            expired = conn.execute(self.q["expired_leases"], {"now": now, "limit": limit})
            report = self._recover(conn, expired.fetchall(), "lease_expired", now)
            if report.exhausted:
                self._finished(conn, report.exhausted)
        return report

    def recover_workers(self, worker_ids: Sequence[str], now: float) -> RescueReport:
        """Startup cleanup: recover at once the running jobs of workers known to be dead
        (same host, process gone), without waiting for their leases, and close their rows."""
        if not worker_ids:
            return RescueReport()
        with self._write("recover_workers") as conn:
            ids = self._list(list(worker_ids))
            rows = conn.execute(self.q["running_of_workers"], {"worker_ids": ids}).fetchall()
            report = self._recover(conn, rows, "startup_cleanup", now)
            if report.exhausted:
                self._finished(conn, report.exhausted)
            for wid in worker_ids:
                conn.execute(self.q["mark_worker_dead"], {"id": wid, "now": now})
                # A dead leader's roles go at once, not when its leases lapse.
                conn.execute(self.q["release_leases_of"], {"holder": wid})
        return report

    def _recover(self, conn: Conn, rows: list[Any], reason: str, now: float) -> RescueReport:
        report = RescueReport()
        q = self.q
        for job_id, attempt, max_attempts, worker in rows:
            exhausted = attempt >= max_attempts
            fence = F_RECOVER_EXHAUSTED if exhausted else F_RECOVER
            why = "lease expired" if reason == "lease_expired" else "its worker process died"
            key = {"job_id": job_id, "attempt": attempt}
            errs = {"error_code": LOST_CODE, "error_detail": f"{why} (worker {worker})"}
            if conn.execute(q["recover_job"], {**key, **fence, **errs, "now": now}).rowcount != 1:
                continue
            lost = AttemptStatus.LOST.value
            conn.execute(q["lose_attempt"], {**key, **errs, "now": now, "status": lost})
            if Event.RECOVERED in self._audit:
                info = detail(
                    reason=reason, attempt=attempt, worker=worker, outcome=fence["to_state"]
                )
                row = _event_row(job_id, now, "RECOVERED", "system", info)
                conn.execute(q["insert_event"], row)
            (report.exhausted if exhausted else report.recovered).append(job_id)
        return report

    def try_lead(self, name: str, holder: str, ttl: float, now: float) -> bool:
        """Take or renew the lease on a maintenance role; True while we hold it."""
        params = {"name": name, "holder": holder, "ttl": ttl, "now": now}
        with self._write("try_lead") as conn:
            return conn.execute(self.q["try_lead"], params).fetchone() is not None

    def resign(self, name: str, holder: str) -> None:
        with self._write("resign") as conn:
            conn.execute(self.q["resign"], {"name": name, "holder": holder})

    def host_workers(self, hostname: str) -> list[tuple[str, int]]:
        with self._read() as conn:
            rows = conn.execute(self.q["host_workers"], {"hostname": hostname}).fetchall()
        return [(r[0], int(r[1])) for r in rows]

    # -- operator actions ------------------------------------------------------------------

    def retry(self, job_ids: Sequence[int], actor: str, now: float) -> list[int]:
        done: list[int] = []
        params = {
            "to_state": T_RETRY.target.value,
            "from_states": self._list(sorted(s.value for s in T_RETRY.source)),
            "now": now,
        }
        left: list[Any] = []
        with self._write("retry") as conn:
            for job_id in job_ids:
                ident = {"job_id": job_id, "from_states": params["from_states"]}
                before = conn.execute(self.q["retry_outcome"], ident).fetchone()
                if (
                    before is None
                    or conn.execute(self.q["retry_job"], {**params, "job_id": job_id}).fetchone()
                    is None
                ):
                    continue
                left.append(before)
                done.append(job_id)
                if Event.RETRIED in self._audit:
                    conn.execute(
                        self.q["insert_event"], _event_row(job_id, now, "RETRIED", actor, None)
                    )
            # The outcome the job leaves is history: kept in the hourly rollup, as pruning
            # does, so "jobs finished" counters (metrics) never go down when a job is retried.
            if left:
                self._roll_up(conn, left)
        return done

    def cancel(self, job_ids: Sequence[int], actor: str, now: float) -> CancelReport:
        report = CancelReport()
        q = self.q
        with self._write("cancel") as conn:
            for job_id in job_ids:
                params = {
                    **F_CANCEL,
                    "job_id": job_id,
                    "now": now,
                    "error_code": "CANCELLED:BY_USER",
                    "error_detail": f"cancelled by {actor} before it started",
                }
                if conn.execute(q["cancel_queued_job"], params).fetchone() is not None:
                    report.cancelled.append(job_id)
                    if Event.CANCELLED in self._audit:
                        conn.execute(
                            q["insert_event"], _event_row(job_id, now, "CANCELLED", actor, None)
                        )
                elif conn.execute(q["request_cancel"], {"job_id": job_id}).fetchone() is not None:
                    report.requested.append(job_id)
            if report.cancelled:
                self._finished(conn, report.cancelled)
        return report

    # -- reads -----------------------------------------------------------------------------

    def get_job(self, job_id: int) -> Job | None:
        with self._read_rows() as conn:
            rows = self._dicts(conn.execute(self.q["get_job"], {"id": job_id}))
        return self._job(rows[0]) if rows else None

    def list_jobs(self, flt: JobFilter) -> list[Job]:
        params = {
            "status": flt.status,
            "type": flt.type,
            "queue": flt.queue,
            "error_code": flt.error_code,
            "before_id": flt.before_id,
            "limit": flt.limit,
        }
        with self._read_rows() as conn:
            return [self._job(r) for r in self._dicts(conn.execute(self.q["list_jobs"], params))]

    def attempts(self, job_id: int) -> list[Attempt]:
        with self._read_rows() as conn:
            rows = self._dicts(conn.execute(self.q["job_attempts"], {"job_id": job_id}))
        dt = self._dt
        return [
            Attempt(
                r["id"],
                r["job_id"],
                r["attempt"],
                r["worker_id"],
                dt(r["started_at"]),
                dt(r["finished_at"]),
                r["status"],
                r["error_code"],
                r["error_detail"],
                r["traceback_ref"],
            )
            for r in rows
        ]

    def events(self, job_id: int) -> list[EventRecord]:
        with self._read_rows() as conn:
            rows = self._dicts(conn.execute(self.q["job_events"], {"job_id": job_id}))
        return [
            EventRecord(
                r["id"], r["job_id"], self._dt(r["ts"]), r["event"], r["actor"], _json(r["detail"])
            )
            for r in rows
        ]

    def blob(self, ref: str) -> str | None:
        if not ref.startswith("blob:") or not ref[5:].isdigit():
            return None
        with self._read_rows() as conn:
            row = conn.execute(self.q["get_blob"], {"id": int(ref[5:])}).fetchone()
        return None if row is None else str(row[0])

    def counts(self) -> list[tuple[str, str, str, int]]:
        with self._read() as conn:
            rows = conn.execute(self.q["count_by_state"], {}).fetchall()
        return [(r[0], r[1], r[2], int(r[3])) for r in rows]

    def hourly_outcomes(self, since: float) -> list[tuple[float, str, int]]:
        """(hour start, outcome, jobs) for every hour since ``since`` that has finished jobs
        (series.sql): hours the minute figures cover whole from them, older ones from live
        rows plus the rollup of pruned ones."""
        with self._read() as conn:
            rows = conn.execute(self.q["hourly_outcomes"], {"since": since}).fetchall()
        return [(self._epoch(r[0]) or 0.0, str(r[1]), int(r[2])) for r in rows]

    # -- workers registry ------------------------------------------------------------------

    def register_worker(self, info: WorkerInfo, now: float) -> None:
        params = {
            "id": info.id,
            "hostname": info.hostname,
            "pid": info.pid,
            "queues": None if info.queues is None else ",".join(info.queues),
            "types": None if info.types is None else ",".join(info.types),
            "concurrency": info.concurrency,
            "now": now,
        }
        with self._write("register_worker") as conn:
            conn.execute(self.q["upsert_worker"], params)

    def worker_seen(
        self, worker_id: str, now: float, counters: Mapping[str, int] | None = None
    ) -> None:
        params = {"id": worker_id, "now": now, "counters": _counters(counters)}
        with self._write("worker_seen") as conn:
            conn.execute(self.q["worker_seen"], params)

    def worker_stopped(
        self, worker_id: str, now: float, counters: Mapping[str, int] | None = None
    ) -> None:
        params = {"id": worker_id, "now": now, "counters": _counters(counters)}
        with self._write("worker_stopped") as conn:
            conn.execute(self.q["worker_stopped"], params)

    def worker_counters(self) -> dict[str, int]:
        """What every worker ever registered here has counted, summed."""
        totals: dict[str, int] = {}
        with self._read() as conn:
            rows = conn.execute(self.q["worker_counters"], {}).fetchall()
        for (text,) in rows:
            for key, value in json.loads(text).items():
                totals[key] = totals.get(key, 0) + int(value)
        return totals


def _ended(outcomes: Sequence[Outcome], applied: Sequence[bool]) -> list[Outcome]:
    """The outcomes that ended an attempt (a released attempt never ran)."""
    return [
        o for o, ok in zip(outcomes, applied, strict=True) if ok and not isinstance(o, Released)
    ]


def _counters(counters: Mapping[str, int] | None) -> str | None:
    return None if counters is None else json.dumps(dict(counters), sort_keys=True)


CHUNK_ROWS = 5000
CHUNK_BYTES = 4 << 20  # payload text per statement: bounds the JSON parameter's size


def _chunks(jobs: Sequence[NewJob]) -> Iterator[Sequence[NewJob]]:
    start, size = 0, 0
    for i, job in enumerate(jobs):
        size += len(job.payload)
        if i - start >= CHUNK_ROWS or (size > CHUNK_BYTES and i > start):
            yield jobs[start:i]
            start, size = i, len(job.payload)
    yield jobs[start:]


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def _event_row(
    job_id: int, ts: float, event: str, actor: str | None, info: str | None
) -> dict[str, Any]:
    return {"job_id": job_id, "ts": ts, "event": str(event), "actor": actor, "detail": info}


def _json(value: Any) -> Any:
    """JSON columns: text on SQLite, already decoded (jsonb) on PostgreSQL. Text that is not
    JSON (only an older errands could have written it) is returned as it is, so the row
    stays readable."""
    if not isinstance(value, str | bytes):
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value if isinstance(value, str) else value.decode("utf-8", "replace")


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
