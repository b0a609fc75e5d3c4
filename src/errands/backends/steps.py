"""The steps noun: durable steps, sleeps and signals (docs/durable-steps.md).

Queries: ``steps.sql``. Every durable call a handler makes is a ``job_steps`` row written
fenced on (job, attempt, running) — a stale attempt writes nothing — either in a write of its
own (``record_step``), in the application's transaction that errands opened on its
connection (``own_transaction`` + ``record_step_in``), or with the run's suspension in the
worker's batch (``_suspend``, called by ``jobs._apply``). A parked job and a signal meet on
the job's row, locked by both (``lock_job``/the fenced update), so no wake-up is lost.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from ..core.records import Step, StepRecord
from ..core.states import State
from ..errors import InvalidTransitionError, JobNotFoundError
from . import forks
from .activity import write_audit
from .base import Audit, Suspended
from .host import (
    F_PARK,
    F_SIGNAL,
    F_SLEEP,
    WORK,
    Conn,
    SQLHost,
    as_text,
    detail,
    dumps,
    from_json,
)
from .step_group import StepGroup

FINAL = (State.SUCCEEDED.value, State.FAILED.value, State.CANCELLED.value)
RETRYABLE = {"failed": State.FAILED.value, "cancelled": State.CANCELLED.value}


RUNNING = {"from_state": State.RUNNING.value}
TIMED_OUT = '{"timeout":true}'
STATE_PARAMS = {"queued": State.QUEUED.value, "waiting": State.WAITING.value}


def _params(r: StepRecord) -> dict[str, Any]:
    return asdict(r)  # the fields are the queries' parameters, by name


def _row(r: StepRecord) -> list[Any]:  # record_steps' order
    return [
        r.job_id,
        r.attempt,
        r.seq,
        r.kind,
        r.name,
        r.started_at,
        r.finished_at,
        r.result,
        r.wake_at,
        r.signal,
        r.ordinal,
    ]


_GROUP_LOCK = threading.Lock()  # makes each backend's group once


class SQLSteps(SQLHost):
    """Durable calls recorded per job, the suspensions they end a run with, and signals."""

    # -- the worker's side, fenced on the attempt --------------------------------------------

    def record_step(self, record: StepRecord, now: float) -> bool:
        """Record a finished step (or a sleep that needs no suspension), committed before
        this returns; False, having written nothing, if the attempt no longer holds its
        job. Concurrent calls of one process share a write and its commit (step_group.py)."""
        return self._steps_group().submit(record)

    def _steps_group(self) -> StepGroup[StepRecord]:
        group: StepGroup[StepRecord] | None = getattr(self, "_step_records", None)
        if group is None or group.generation != forks.generation:
            with _GROUP_LOCK:
                group = getattr(self, "_step_records", None)
                if group is None or group.generation != forks.generation:
                    group = StepGroup(self._record_many)
                    self._step_records = group
        return group

    def _record_many(self, records: Sequence[StepRecord]) -> list[bool]:
        """Records in one write, each fenced on its own attempt: whether each was written."""
        with self._step_writer(), self._write("record_step") as conn:
            if len(records) == 1:
                return [bool(self._record(conn, records[0]))]
            rows = dumps([_row(r) for r in records])
            found = conn.execute(self.q["record_steps"], {"rows": rows, **RUNNING}).fetchall()
        written = {(int(job_id), int(seq)) for job_id, seq in found}
        return [(r.job_id, r.seq) in written for r in records]

    def record_step_in(self, connection: Any, record: StepRecord, now: float) -> bool:
        """The same, in the transaction ``own_transaction`` opened on the application's
        connection (never committed here)."""
        with self._user_conn(connection) as conn:
            return bool(self._record(conn, record))

    def _record(self, conn: Conn, record: StepRecord) -> int:
        params = {**_params(record), **RUNNING}
        return int(conn.execute(self.q["record_step"], params).rowcount)

    def own_transaction(self, connection: Any) -> contextlib.AbstractContextManager[Conn]:
        """A transaction errands begins on the application's connection (refused if one is
        open already), commits when the block ends and rolls back if it raises."""
        return self._own_transaction(connection)

    def _step_writer(self) -> contextlib.AbstractContextManager[Any]:
        """Held around a handler thread's step write: where the database has one writer
        (SQLite, user_tx.py) the process's handler threads queue on a lock rather than meet
        the busy handler's millisecond sleeps; elsewhere nothing."""
        return contextlib.nullcontext()

    def _own_transaction(self, connection: Any) -> contextlib.AbstractContextManager[Conn]:
        """The dialect's begin/commit on a user's connection (user_tx.py)."""
        raise NotImplementedError

    def take_signal(self, record: StepRecord, now: float) -> tuple[bool, str | None]:
        """A run reaches ``ctx.wait_for``: record the wait (fenced) if it is new, and answer
        it now if its signal is there or its timeout has passed. Returns (whether the
        attempt still holds the job, the answer as stored — ``{"payload": …}`` or
        ``{"timeout": true}`` —, or None: the run must park)."""
        key = {"job_id": record.job_id, "attempt": record.attempt, **RUNNING}
        with self._step_writer(), self._write("take_signal") as conn:
            if conn.execute(self.q["fence_running"], key).fetchone() is None:
                return False, None
            conn.execute(self.q["insert_step"], _params(record))
            return True, self._answer(conn, record.job_id, now)

    def _answer(self, conn: Conn, job_id: int, now: float) -> str | None:
        """Answer the job's open wait if its signal is there or its timeout passed (the
        row is locked by the caller): the stored result, or None if it still waits."""
        rows = self._dicts(conn.execute(self.q["open_wait"], {"job_id": job_id}))
        if not rows:
            return None
        wait = rows[0]
        params = {"job_id": job_id, "signal": wait["signal"], "skip": int(wait["ordinal"]) - 1}
        found = conn.execute(self.q["nth_signal"], params).fetchone()
        if found is not None:
            payload = found[0]
            text = "null" if payload is None else as_text(payload)
            result = f'{{"payload":{text}}}'
        elif wait["wake_at"] is not None and (self._epoch(wait["wake_at"]) or 0.0) <= now:
            result = TIMED_OUT
        else:
            return None
        params = {"job_id": job_id, "seq": wait["seq"], "now": now, "result": result}
        conn.execute(self.q["finish_wait"], params)
        return result

    def _suspend(
        self, conn: Conn, o: Suspended, now: float, events: list[list[Any]], actor: str
    ) -> bool:
        """Apply a suspension (jobs._apply, in the worker's batch): fenced, the claim's
        attempt given back, the sleep or wait reached first written with it; a parked job
        whose signal came meanwhile (or whose timeout passed) is due at once."""
        fence = F_PARK if o.waiting else F_SLEEP
        key = {"job_id": o.job_id, "attempt": o.attempt}
        params = {**key, **fence.params, "started_at": o.started_at, "run_at": o.run_at}
        if conn.execute(self.q["suspend_job"], params).rowcount != 1:
            return False
        conn.execute(self.q["delete_attempt"], key)
        if o.record is not None:
            conn.execute(self.q["insert_step"], _params(o.record))
        name = None if o.record is None else o.record.name
        events.append([o.job_id, now, fence.event, actor, _info(o.attempt, o.run_at, name)])
        if o.waiting and self._answer(conn, o.job_id, now) is not None:
            events.append(self._wake(conn, o.job_id, now, actor, "arrived while parking"))
        return True

    def _wake(self, conn: Conn, job_id: int, now: float, actor: str, why: str) -> list[Any]:
        """A parked job whose wait was just answered is due now; its SIGNALLED event row."""
        conn.execute(self.q["wake_job"], {"job_id": job_id, "now": now, **F_SIGNAL.params})
        self._woke(conn, WORK)  # idle workers claim it once this commits
        return [job_id, now, F_SIGNAL.event, actor, detail(by=why)]

    # -- signals and timeouts ------------------------------------------------------------

    def send_signal(
        self,
        target: int | str,
        name: str,
        payload: str | None,
        actor: str,
        now: float,
        *,
        audit: Audit | None = None,
    ) -> int:
        """Keep a signal for a job that is not final (by id, or by the unique_key of the
        newest such job) and, if the job is parked waiting for it, make it due now.
        Returns the job's id; a finished or unknown job is refused, writing nothing. A
        signal sent by hand writes its activity row (``audit``, given the job's id) with it."""
        with self._write("send_signal") as conn:
            job_id = self._target(conn, target)
            found = self._dicts(conn.execute(self.q["lock_job"], {"job_id": job_id}))
            if not found:
                raise JobNotFoundError(f"no job {job_id}; signals go to jobs that exist")
            status = found[0]["status"]
            if status in FINAL:
                raise InvalidTransitionError(
                    f"job {job_id} is {status}: a finished job takes no signal (retry it first)"
                )
            sig = {"job_id": job_id, "name": name, "payload": payload, "now": now}
            conn.execute(self.q["insert_signal"], {**sig, "actor": actor})
            if status == State.WAITING.value and self._answer(conn, job_id, now) is not None:
                row = self._wake(conn, job_id, now, actor, f"signal {name}")
                self._step_events(conn, [row])
            write_audit(conn, self.q, audit, job_id)
        return job_id

    def _target(self, conn: Conn, target: int | str) -> int:
        if isinstance(target, int):
            return target
        params = {
            "unique_key": target,
            **dict(zip(("succeeded", "failed", "cancelled"), FINAL, strict=True)),
        }
        row = conn.execute(self.q["job_by_unique_key"], params).fetchone()
        if row is None:
            raise JobNotFoundError(
                f"no unfinished job holds unique_key {target!r:.80}; signal it by id instead"
            )
        return int(row[0])

    def wake_waits(self, now: float, *, limit: int = 1000) -> list[int]:
        """Answer the waits whose timeout has passed (the rescuer's pass): their jobs are
        due now, and ``wait_for`` raises ``SignalTimeout`` in them. Returns their ids."""
        params = {"now": now, "limit": limit, "waiting": State.WAITING.value}
        woken: list[int] = []
        with self._write("wake_waits") as conn:
            for (job_id,) in [tuple(r) for r in conn.execute(self.q["due_waits"], params)]:
                found = self._dicts(conn.execute(self.q["lock_job"], {"job_id": job_id}))
                if not found or found[0]["status"] != State.WAITING.value:
                    continue
                if self._answer(conn, job_id, now) is not None:
                    woken.append(job_id)
            self._step_events(conn, [self._wake(conn, j, now, "system", "timeout") for j in woken])
        return woken

    def _step_events(self, conn: Conn, rows: list[list[Any]]) -> None:
        rows = [r for r in rows if r[2] in self._audit]
        if rows:
            conn.execute(self.q["insert_events"], {"rows": dumps(rows)})

    # -- reads and the operator's reset --------------------------------------------------

    def steps(self, job_id: int) -> list[Step]:
        with self._read_rows() as conn:
            rows = self._dicts(conn.execute(self.q["list_steps"], {"job_id": job_id}))
        return [
            Step(
                job_id=int(r["job_id"]),
                seq=int(r["seq"]),
                kind=r["kind"],
                name=r["name"],
                attempt=int(r["attempt"]),
                started_at=self._dt(r["started_at"]),
                finished_at=self._dt(r["finished_at"]),
                result=from_json(r["result"]),
                wake_at=self._dt(r["wake_at"]),
            )
            for r in rows
        ]

    def journal(self, job_id: int) -> list[dict[str, Any]]:
        """The recorded calls as the worker replays them: kind, name, result (JSON text),
        wake_at (unix seconds), finished (bool)."""
        with self._read() as conn:
            rows = self._dicts(conn.execute(self.q["list_steps"], {"job_id": job_id}))
        return [
            {
                "kind": r["kind"],
                "name": r["name"],
                "result": None if r["result"] is None else as_text(r["result"]),
                "wake_at": self._epoch(r["wake_at"]),
                "finished": r["finished_at"] is not None,
            }
            for r in rows
        ]

    def durable_counts(self, now: float, grace: float) -> dict[str, int]:
        """Jobs sleeping, parked for a signal, and parked more than ``grace`` seconds past
        their wait's timeout (stats, errands check)."""
        params = {"now": now, "grace": grace, **STATE_PARAMS}
        row = self._fetch("durable_counts", params)[0]
        return {k: int(row[k] or 0) for k in ("sleeping", "signal_waiting", "waits_past_timeout")}

    def reset_steps(self, job_ids: Sequence[int]) -> int:
        """Forget the recorded calls of failed or cancelled jobs (before a manual retry)."""
        n = 0
        with self._write("reset_steps") as conn:
            for job_id in job_ids:
                params = {"job_id": job_id, **RETRYABLE}
                n += max(conn.execute(self.q["delete_steps"], params).rowcount, 0)
        return n


def _info(attempt: int, run_at: float | None, name: str | None) -> str:
    fields: dict[str, Any] = {"attempt": attempt}
    if run_at is not None:
        fields["until"] = round(run_at, 3)
    if name is not None:
        fields["name"] = name
    return detail(**fields)
