"""The durable calls of one run: ``ctx.step``, ``ctx.sleep``, ``ctx.wait_for``
(docs/durable-steps.md).

Each call is numbered when it is called (``seq``, from 0) and named ``name``, ``name#2``… for
repeats of the same kind and name. The job's recorded calls are read once, at the run's
first durable call; the k-th call of this run must be the k-th recorded one (kind and
name), else the job fails ``STEP:MISMATCH``. A recorded call returns what was recorded; a
new one runs and is recorded fenced on the attempt (backends/steps.py) — a stale attempt
records nothing and its handler is stopped by ``StaleAttempt``, which ``except Exception``
cannot catch. A sleep or a wait that must wait ends the run with ``Suspended`` (also not an
``Exception``), whose outcome the worker records in its batch like any other.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from typing import Any

from ..backends.base import ClaimedJob, Suspended
from ..backends.verbs import Backend
from ..core import payload as payload_json
from ..core.records import StepRecord
from ..core.steps import check_name
from ..errors import (
    JobError,
    PayloadError,
    SignalTimeout,
    StaleAttempt,
    StepMismatch,
)
from ..errors import Suspended as Suspend
from .db import WorkerDatabase

MAX_CALLS = 10_000  # durable calls per job: a journal is read whole at each run's first call


class Journal:
    """One run's durable calls (a JobLease holds one: one run, one thread or task)."""

    __slots__ = (
        "_backend",
        "_clock",
        "_counts",
        "_db",
        "_job",
        "_max_bytes",
        "_next",
        "_recorded",
        "_started",
        "step_key",
    )

    def __init__(
        self,
        backend: Backend,
        db: WorkerDatabase,
        job: ClaimedJob,
        started_at: Callable[[], float],
        clock: Callable[[], float],
        max_bytes: int | None,
    ) -> None:
        self._backend, self._db, self._job = backend, db, job
        self._started, self._clock, self._max_bytes = started_at, clock, max_bytes
        self._recorded: list[dict[str, Any]] | None = None
        self._counts: dict[tuple[str, str], int] = {}
        self._next = 0
        self.step_key: str | None = None  # the step running now: its idempotency key

    def now(self) -> float:
        return self._clock()

    # -- numbering and matching ------------------------------------------------------------

    def _call(self, kind: str, name: str) -> tuple[int, str, int, dict[str, Any] | None]:
        """Number this call; the recorded call of the same number, checked to match."""
        if self._recorded is None:
            self._recorded = self._db.call(self._backend.journal, self._job.id)
        k = self._counts.get((kind, name), 0) + 1
        self._counts[(kind, name)] = k
        full = name if k == 1 else f"{name}#{k}"
        seq = self._next
        self._next += 1
        if seq >= MAX_CALLS:
            raise JobError(
                "STEP:LIMIT",
                f"a job holds at most {MAX_CALLS} durable calls; split the work into jobs",
                retry=False,
            )
        rec = self._recorded[seq] if seq < len(self._recorded) else None
        if rec is not None and (rec["kind"], rec["name"]) != (kind, full):
            raise StepMismatch(
                f"durable call {seq + 1} of job {self._job.id} is {kind} {full!r} but the job "
                f"recorded {rec['kind']} {rec['name']!r} there (its code changed between runs); "
                "retry it with reset_steps=True to start over"
            )
        return seq, full, k, rec

    def _record(self, seq: int, kind: str, name: str, started: float, **fields: Any) -> StepRecord:
        job = self._job
        return StepRecord(job.id, job.attempt, seq, kind, name, started, **fields)

    def _stale(self) -> StaleAttempt:
        job = self._job
        return StaleAttempt(
            f"job {job.id} attempt {job.attempt} no longer holds the job (its lease was "
            "recovered): this run records nothing more"
        )

    def _remember(self, seq: int, kind: str, name: str, result: str | None) -> None:
        assert self._recorded is not None
        if seq == len(self._recorded):
            entry = {"kind": kind, "name": name, "result": result, "finished": True}
            self._recorded.append({**entry, "wake_at": None})

    def _encode(self, name: str, result: Any) -> str | None:
        try:
            return payload_json.encode(
                result,
                what=f"step {name!r} result",
                max_bytes=self._max_bytes,
                setting="max_payload_bytes",
            )
        except PayloadError as exc:
            raise JobError("INVALID_OUTPUT:STEP", str(exc), retry=False) from None

    # -- steps -------------------------------------------------------------------------------

    def begin_step(self, name: str) -> tuple[int, str, dict[str, Any] | None]:
        seq, full, _, rec = self._call("step", check_name(name, "ctx.step"))
        if rec is None:
            self.step_key = f"errands:{self._job.id}:{seq}:{full}"
        return seq, full, rec

    def step(self, name: str, fn: Callable[..., Any], args: Any, kwargs: Any, conn: Any) -> Any:
        seq, full, rec = self.begin_step(name)
        if rec is not None:
            return _decode(rec["result"])
        started = self._clock()
        try:
            if conn is None:
                text = self._encode(full, fn(*args, **kwargs))
                record = self._record(
                    seq, "step", full, started, finished_at=self._clock(), result=text
                )
                if not self._db.call(self._backend.record_step, record, self._clock()):
                    raise self._stale()
            else:
                with self._backend.own_transaction(conn):
                    text = self._encode(full, fn(*args, **kwargs))
                    record = self._record(
                        seq, "step", full, started, finished_at=self._clock(), result=text
                    )
                    if not self._backend.record_step_in(conn, record, self._clock()):
                        raise self._stale()  # inside: fn's writes roll back with it
        finally:
            self.step_key = None
        self._remember(seq, "step", full, text)
        return _decode(text)

    async def step_async(
        self, name: str, fn: Callable[..., Any], args: Any, kwargs: Any, conn: Any
    ) -> Any:
        import asyncio

        seq, full, rec = self.begin_step(name)
        if rec is not None:
            return _decode(rec["result"])
        started = self._clock()
        try:
            if conn is not None:
                raise ValueError(
                    "ctx.step_async(connection=…) is not supported yet: record a step on your "
                    "connection from a sync handler, or pass no connection"
                )
            value = fn(*args, **kwargs)
            if inspect.isawaitable(value):
                value = await value
            text = self._encode(full, value)
            record = self._record(
                seq, "step", full, started, finished_at=self._clock(), result=text
            )
            ok = await asyncio.to_thread(
                self._db.call, self._backend.record_step, record, self._clock()
            )
            if not ok:
                raise self._stale()
        finally:
            self.step_key = None
        self._remember(seq, "step", full, text)
        return _decode(text)

    # -- sleeps ----------------------------------------------------------------------------

    def sleep_until(self, wake: float, name: str) -> None:
        seq, full, _, rec = self._call("sleep", check_name(name, "ctx.sleep"))
        now = self._clock()
        if rec is not None:
            wake = rec["wake_at"] if rec["wake_at"] is not None else now
            if now >= wake:
                return
            raise Suspend(self._suspended(False, wake, None))
        record = self._record(seq, "sleep", full, now, finished_at=wake, wake_at=wake)
        if wake <= now:  # nothing to wait for: recorded, so later runs agree on the numbering
            if not self._db.call(self._backend.record_step, record, now):
                raise self._stale()
            self._remember(seq, "sleep", full, None)
            return
        raise Suspend(self._suspended(False, wake, record))

    def _suspended(self, waiting: bool, run_at: float | None, rec: StepRecord | None) -> Any:
        job = self._job
        return Suspended(job.id, job.attempt, self._started(), waiting, run_at, rec)

    # -- signals ---------------------------------------------------------------------------

    def wait_for(self, name: str, timeout: float | None) -> Any:
        seq, full, k, rec = self._call("wait", check_name(name, "ctx.wait_for"))
        if rec is not None and rec["finished"]:
            return _answer(name, rec["result"])
        now = self._clock()
        if rec is not None:
            deadline = rec["wake_at"]
        else:
            deadline = None if timeout is None else now + timeout
        record = self._record(seq, "wait", full, now, wake_at=deadline, signal=name, ordinal=k)
        ok, answer = self._db.call(self._backend.take_signal, record, now)
        if not ok:
            raise self._stale()
        if answer is None:  # park: the worker records the run's end, fenced, in its batch
            raise Suspend(self._suspended(True, None, None))
        self._remember(seq, "wait", full, answer)
        return _answer(name, answer)


def _decode(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _answer(name: str, text: str | None) -> Any:
    value = _decode(text) or {}
    if value.get("timeout"):
        raise SignalTimeout(f"no signal {name!r} came within the wait's timeout")
    return value.get("payload")
