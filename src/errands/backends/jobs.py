"""The jobs noun, producer and worker side: enqueue, claim, finish, heartbeat, cancels.

Queries: ``jobs.sql``. Every outcome is fenced on (job id, attempt, from-state) with the
states bound from ``states.TRANSITIONS``, and records the audit event of the same transition.
The per-batch path (``finish_and_claim``) is one transaction of a few statements whatever the
batch size; nothing here does per-row work beyond building the rows themselves and grouping
the batch's figures (figures.py: ``count_held``).
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter
from typing import Any

from ..core.states import AttemptStatus, Event
from . import figures
from .activity import write_audit
from .base import (
    Audit,
    Cancelled,
    ClaimedJob,
    ClaimRequest,
    EnqueueCall,
    Failed,
    NewJob,
    Outcome,
    Released,
    Retried,
    Snoozed,
    Succeeded,
    Suspended,
)
from .bulk_rows import HEADERS, RULES, UNIQUE_KEY, alike_runs, chunks
from .claim_position import ClaimScans
from .deadline import past_deadline
from .debounce import debounce_steps, debounced
from .host import (
    ALL,
    DONE,
    EXEC,
    F_CANCEL_RUNNING,
    F_FAIL,
    F_RELEASE,
    F_RETRY_LATER,
    F_SNOOZE,
    F_SUCCEED,
    LAST,
    LOST_CODE,
    MANY,
    RUNNING,
    T_CLAIM,
    T_ENQUEUE,
    WORK,
    Conn,
    Step,
    Steps,
    as_text,
    attempt_detail,
    column_index,
    detail,
    drive,
    dumps,
    event_of,
    event_row,
)
from .job_rows import insert_params

ENQUEUED = event_of("enqueue")
CLAIMED = event_of("claim")
CHUNK_ROWS = 5000
CHUNK_BYTES = 4 << 20  # payload text per statement: bounds the JSON parameter's size
ALIKE_RUN_MIN = 32  # alike jobs per statement, on average, for insert_jobs_alike to pay


class SQLJobs(ClaimScans):
    """Jobs in (enqueue) and the worker's verbs on the jobs it holds."""

    group_commit = False  # see verbs.JobVerbs; the SQLite backend turns it on
    # The driver reports an INSERT's last id and row count (Step mode LAST) and one
    # statement's new ids are consecutive: the bulk insert then needs no RETURNING (SQLite).
    counted_inserts = False

    # -- enqueue ---------------------------------------------------------------------------

    def enqueue(
        self,
        jobs: Sequence[NewJob],
        now: float,
        *,
        actor: str,
        connection: Any = None,
        audit: Audit | None = None,
    ) -> list[int]:
        with self._write("enqueue") if connection is None else self._user_conn(connection) as conn:
            ids = self._insert(conn, jobs, now, actor)
            if audit is not None:  # an operator's enqueue by hand: its row goes with it
                write_audit(conn, self.q, audit, ids)
            return ids

    def enqueue_grouped(self, calls: Sequence[EnqueueCall]) -> list[list[int]]:
        """Several enqueue calls in one transaction (one commit: one fsync shared), each call's
        ids in a list of its own, written in order: a later call's unique_key meets an earlier's."""
        with self._write("enqueue") as conn:
            return [self._insert(conn, c.jobs, c.now, c.actor) for c in calls]

    def _insert(self, conn: Conn, jobs: Sequence[NewJob], now: float, actor: str) -> list[int]:
        return drive(conn, self._enqueue_steps(jobs, now, actor))

    def _enqueue_steps(self, jobs: Sequence[NewJob], now: float, actor: str) -> Steps[list[int]]:
        """The whole enqueue write: the jobs (``_insert_steps``, which a dialect may override),
        each with its limit key and group, so a limited job is never claimable without its limit;
        and the wake-up (delayed jobs too: an idle worker recomputes when its next is due)."""
        ids = yield from self._insert_steps(jobs, now, actor)
        if not self.inserts_wake and (wake := self._woke_step(WORK)) is not None:
            yield wake
        return ids

    def _insert_steps(self, jobs: Sequence[NewJob], now: float, actor: str) -> Steps[list[int]]:
        """The enqueue write as steps, so the same code runs on a blocking connection
        (``drive``) and on an asyncio one (the PostgreSQL backend's ``enqueue_async``)."""
        if (
            len(jobs) > 1
            and list(map(UNIQUE_KEY, jobs)).count(None) == len(jobs)
            and list(map(HEADERS, jobs)).count(None) == len(jobs)
            and list(map(RULES, jobs)).count(None) == len(jobs)
        ):
            # Many plain jobs: one statement per chunk (a per-row INSERT costs ~5x more in the
            # driver than the row costs in the database). Unique keys need the per-row check,
            # and headers (middleware) are written per row.
            return (yield from self._insert_batched_steps(jobs, now, actor))
        ids: list[int] = []
        events: list[dict[str, Any]] = []
        insert, existing = self.q["insert_job"], self.q["active_job_by_unique_key"]
        to_state = T_ENQUEUE.target.value
        for job in jobs:
            if debounced(job):  # its own write (debounce.py)
                ids.append((yield from debounce_steps(self.q, self._audit, job, now, actor)))
                continue
            row = yield Step(insert, insert_params(job, now, to_state))
            # Both statements return one column, id; a step's row carries no column names.
            if row is None:  # an active job (or a succeeded one, unique_for) holds this key
                ids.append((yield Step(existing, {"unique_key": job.unique_key, "now": now}))[0])
            else:
                ids.append(row[0])
                events.append(event_row(row[0], now, ENQUEUED, actor, None))
        if events and ENQUEUED in self._audit:
            if len(events) == 1:  # the one-by-one enqueue: executemany costs more for one row
                yield Step(self.q["insert_event"], events[0], EXEC)
            else:
                yield Step(self.q["insert_event"], events, MANY)
        return ids

    def _insert_batched_steps(
        self,
        jobs: Sequence[NewJob],
        now: float,
        actor: str,
        to_state: str = T_ENQUEUE.target.value,
        event: Event | None = ENQUEUED,
    ) -> Steps[list[int]]:
        """Many jobs, one statement per chunk (or per run of alike jobs in it: the fields
        they share bound once), and one for the chunk's ENQUEUED events. ``to_state`` and
        ``event``: what the dependencies noun writes its waiting jobs with (no event: it
        writes their WAITING events, with their upstream ids, itself)."""
        ids: list[int] = []
        q = self.q
        for chunk in chunks(jobs, CHUNK_ROWS, CHUNK_BYTES):
            runs = alike_runs(chunk, ALIKE_RUN_MIN)
            new: list[int] = []
            if runs is None:
                batch = dumps(
                    [
                        [
                            j.queue,
                            j.type,
                            j.payload,
                            j.priority,
                            j.max_attempts,
                            j.run_at,
                            j.limit_key,
                            j.limit_group,
                        ]
                        for j in chunk
                    ]
                )
                rows = yield Step(
                    q["insert_jobs"], {"batch": batch, "to_state": to_state, "now": now}, ALL
                )
                new = sorted(r[0] for r in rows)  # the one column, id
            for run in runs or ():
                head = run[0]
                params = {
                    "payloads": dumps([j.payload for j in run]),
                    "queue": head.queue,
                    "type": head.type,
                    "priority": head.priority,
                    "max_attempts": head.max_attempts,
                    "run_at": head.run_at,
                    "limit_key": head.limit_key,
                    "limit_group": head.limit_group,
                    "to_state": to_state,
                    "now": now,
                }
                if self.counted_inserts:  # the run's ids: the consecutive range ending at last
                    last, count = yield Step(q["insert_jobs_alike_counted"], params, LAST)
                    new += range(last - count + 1, last + 1) if count == len(run) else ()
                else:
                    rows = yield Step(q["insert_jobs_alike"], params, ALL)
                    new += sorted(r[0] for r in rows)  # runs go in in order: ids keep growing
            if len(new) != len(chunk):  # cannot happen without unique keys; never guess ids
                raise RuntimeError(f"inserted {len(new)} of {len(chunk)} jobs")
            ids.extend(new)
            if event is not None and event in self._audit:
                params = {"now": now, "event": event.value, "actor": actor}
                if new[-1] - new[0] + 1 == len(new):  # one range (unique, in order): by key
                    params |= {"first": new[0], "last": new[-1]}
                    yield Step(q["insert_enqueued_events_range"], params, EXEC)
                else:
                    params["job_ids"] = dumps(new)
                    yield Step(q["insert_enqueued_events"], params, EXEC)
        return ids

    # -- claim -----------------------------------------------------------------------------

    def claim(self, request: ClaimRequest, now: float) -> list[ClaimedJob]:
        if not request.types or request.limit <= 0:
            return []
        with self._write("claim") as conn:
            rows, col = self._claim_in(conn, request, now)
        return self._claimed(rows, col)

    def _claim_in(
        self, conn: Conn, request: ClaimRequest, now: float
    ) -> tuple[list[Any], dict[str, int]]:
        """Claim inside the caller's transaction; the rows are mapped to jobs after commit,
        so the write lock is not held for it."""
        if not request.types or request.limit <= 0:
            return [], {}
        params = {
            "to_state": T_CLAIM.target.value,
            "worker_id": request.worker_id,
            "now": now,
            "lease_seconds": request.lease_seconds,
            "types": self._list(list(request.types)),
            "queues": None if request.queues is None else self._list(list(request.queues)),
            "limit": request.limit,
        }
        params.update(self._claim_start(params["types"], params["queues"], now, request.from_front))
        if request.limited:  # limits are counted in this transaction (flow.py)
            return self._claim_limited(conn, request, params, now)
        return self._claim_rows(conn, params, now)

    def _claim_rows(
        self, conn: Conn, params: dict[str, Any], now: float
    ) -> tuple[list[Any], dict[str, int]]:
        """The claim, its attempt rows and its CLAIMED events, in three statements; a dialect
        that can write them in one overrides this (PostgresBackend: one round trip)."""
        cur = conn.execute(self.q["claim"], params)
        rows: list[Any] = cur.fetchall()
        if not rows:
            return [], {}
        col = column_index(cur)
        i_id = col["id"]
        running = AttemptStatus.RUNNING.value
        ids = dumps([r[i_id] for r in rows])
        conn.execute(self.q["open_attempts"], {"job_ids": ids, "now": now, "status": running})
        if CLAIMED in self._audit:
            params = {"job_ids": ids, "now": now, "event": CLAIMED.value}
            conn.execute(self.q["insert_claimed_events"], params)
        return rows, col

    def _claimed(self, rows: list[Any], col: dict[str, int]) -> list[ClaimedJob]:
        """Claimed rows as jobs, read by column name: the positions are looked up once per
        batch, so each row costs what a positional read does."""
        if not rows:
            return []
        ep, in_order = self._epoch, "in_order" in col  # kept as the limited claim chose
        i_id, i_queue, i_type, i_payload = col["id"], col["queue"], col["type"], col["payload"]
        i_prio, i_att, i_max = col["priority"], col["attempts"], col["max_attempts"]
        i_run, i_created, i_cancel = col["run_at"], col["created_at"], col["cancel_requested"]
        i_headers, i_error = col["headers"], col["error_code"]
        i_claimed = col.get("claimed_at")  # the limited claim's rate-counted starts
        jobs = [
            ClaimedJob(
                r[i_id],
                r[i_queue],
                r[i_type],
                as_text(r[i_payload]),
                r[i_prio],
                r[i_att],
                r[i_max],
                ep(r[i_run]) or 0.0,
                ep(r[i_created]) or 0.0,
                bool(r[i_cancel]),
                None if r[i_headers] is None else as_text(r[i_headers]),
                None if i_claimed is None else r[i_claimed],
                r[i_error] == LOST_CODE,
            )
            for r in rows
        ]
        if len({j.priority for j in jobs}) > 1 and not in_order:
            jobs.sort(key=lambda j: (-j.priority, j.run_at, j.id))
        elif not in_order:  # the common case, one priority: a C key instead of a lambda per job
            jobs.sort(key=attrgetter("run_at", "id"))
        return jobs

    # -- outcomes --------------------------------------------------------------------------

    def finish(
        self,
        outcomes: Sequence[Outcome],
        worker_id: str,
        now: float,
        held: Sequence[ClaimedJob] | None = None,
        *,
        recorded: list[Outcome] | None = None,
    ) -> list[bool]:
        """Record outcomes of attempts this worker holds, in one transaction.

        Each is fenced on (job id, attempt, status='running'); the returned flags say which
        applied. A refused one (the lease was recovered and the job moved on) changes nothing.
        Successes — the hot path — go in one batched statement; the rest one by one.
        ``held``: the claimed job of each outcome, in the same order (the worker's slots hold
        them); with them the batch's figures are grouped in Python instead of read back from
        the rows it wrote (figures.py: count_held). ``recorded``, if given, is filled with
        the outcomes as recorded: a retry past its job's deadline became its failure.
        """
        _check_held(outcomes, held)
        with self._write("finish") as conn:
            return self._finish_in(conn, outcomes, worker_id, now, held, recorded)

    def finish_and_claim(
        self,
        outcomes: Sequence[Outcome],
        worker_id: str,
        request: ClaimRequest,
        now: float,
        held: Sequence[ClaimedJob] | None = None,
        *,
        recorded: list[Outcome] | None = None,
    ) -> tuple[list[bool], list[ClaimedJob]]:
        """``finish`` then ``claim`` in one transaction: one commit (one fsync with SQLite's
        synchronous=FULL, one WAL flush on PostgreSQL) per batch instead of two. All or
        nothing: if the claim fails, the outcomes are not recorded either."""
        _check_held(outcomes, held)
        with self._write("finish") as conn:
            applied = self._finish_in(conn, outcomes, worker_id, now, held, recorded)
            rows, col = self._claim_in(conn, request, now)
        return applied, self._claimed(rows, col)

    def _finish_in(
        self,
        conn: Conn,
        outcomes: Sequence[Outcome],
        worker_id: str,
        now: float,
        held: Sequence[ClaimedJob] | None,
        recorded: list[Outcome] | None = None,
    ) -> list[bool]:
        attempts: list[list[Any]] = []
        events: list[list[Any]] = []
        if not all(isinstance(o, Succeeded) for o in outcomes):
            outcomes = past_deadline(conn, self.q, outcomes)  # deadline.py
        if recorded is not None:  # (a transaction tried again overwrites it)
            recorded[:] = outcomes
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
                [o.job_id, o.started_at, Event.STARTED, worker_id, attempt_detail(o.attempt)]
                for o, ok in zip(outcomes, applied, strict=True)
                if ok and not isinstance(o, Released)
            )
        self._write_rows(conn, attempts, events, now)
        if held is not None:  # rate windows count handler starts (flow.py)
            self._handler_starts(conn, outcomes, held)
        final = [
            o.job_id
            for o, ok in zip(outcomes, applied, strict=True)
            if ok and not isinstance(o, (Released, Retried, Snoozed, Suspended))
        ]
        self._woke(conn, DONE, final)  # outcomes recorded (final ones: waiters re-read them)
        if final:
            self._release(conn, final, now, worker_id)  # their waiting dependents (deps.py)
        # The batch counts its own figures, one statement per table (figures.py): grouped in
        # Python from what the worker holds, or read back from the rows it wrote.
        if (
            held is not None
            and _once_each(succeeded, done)
            and figures.count_held(conn, self.q, outcomes, applied, held, now, self._elapsed)
        ):
            return applied
        ended = _ended(outcomes, applied)
        unsuccessful = [o.job_id for o in ended if not isinstance(o, Succeeded)]
        figures.count(conn, self.q, [o.job_id for o in ended], unsuccessful)
        return applied

    def _succeed(
        self, conn: Conn, succeeded: Sequence[Succeeded], worker_id: str, now: float
    ) -> set[tuple[int, int]]:
        """The hot path: every success of a batch in three statements sharing one JSON
        parameter (the fenced update, the attempt rows, the audit events)."""
        q = self.q
        batch = [[o.job_id, o.attempt, o.started_at, o.result] for o in succeeded]
        text = dumps(batch)
        params = {**F_SUCCEED.params, "now": now, "batch": text}
        cur = conn.execute(q["succeed_jobs"], params)
        col = column_index(cur)
        i_id, i_att = col["id"], col["attempts"]
        done = {(r[i_id], r[i_att]) for r in cur.fetchall()}
        if not done:
            return done
        if len(done) < len(batch):  # some were refused: only the applied ones get their rows
            text = dumps([b for b in batch if (b[0], b[1]) in done])
        status = AttemptStatus.SUCCEEDED.value
        conn.execute(q["close_succeeded_attempts"], {"now": now, "batch": text, "status": status})
        event = F_SUCCEED.event
        if event in self._audit:
            params = {"now": now, "batch": text, "event": event.value, "actor": worker_id}
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
            self._woke(conn, DONE, [outcome.job_id])
            figures.count(conn, self.q, [outcome.job_id], [])
            self._release(conn, [outcome.job_id], now, worker_id)
        return True

    def _write_rows(
        self, conn: Conn, attempts: list[list[Any]], events: list[list[Any]], now: float
    ) -> None:
        """The attempt-row updates and audit events that go with applied outcomes."""
        if attempts:
            conn.execute(self.q["close_attempts"], {"now": now, "batch": dumps(attempts)})
        audit = self._audit
        rows = [e for e in events if e[2] in audit]
        if rows:
            conn.execute(self.q["insert_events"], {"rows": dumps(rows)})

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
            if conn.execute(q["release_job"], {**key, **F_RELEASE.params}).rowcount != 1:
                return False
            conn.execute(q["delete_attempt"], key)
            events.append([o.job_id, now, F_RELEASE.event, actor, attempt_detail(o.attempt)])
            return True
        if isinstance(o, Succeeded):
            batch = dumps([[o.job_id, o.attempt, o.started_at, o.result]])
            if not conn.execute(
                q["succeed_jobs"], {**F_SUCCEED.params, "now": now, "batch": batch}
            ).fetchall():
                return False
            status = AttemptStatus.SUCCEEDED.value
            attempts.append([o.job_id, o.attempt, status, o.started_at, None, None, None])
            events.append([o.job_id, now, F_SUCCEED.event, actor, attempt_detail(o.attempt)])
            return True
        if isinstance(o, Suspended):  # a sleep or a wait (steps.py)
            return self._suspend(conn, o, now, events, actor)
        if isinstance(o, Snoozed):  # queued again later; max_attempts grows by one
            params = {**key, **F_SNOOZE.params, "started_at": o.started_at, "run_at": o.run_at}
            if conn.execute(q["snooze_job"], params).rowcount != 1:
                return False
            status = AttemptStatus.SNOOZED.value
            attempts.append([o.job_id, o.attempt, status, o.started_at, None, None, None])
            info = detail(attempt=o.attempt, delay=round(o.delay, 3))
            events.append([o.job_id, now, F_SNOOZE.event, actor, info])
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
            cur = conn.execute(q["cancel_running_job"], {**base, **F_CANCEL_RUNNING.params})
            status = AttemptStatus.CANCELLED
            event, info = F_CANCEL_RUNNING.event, attempt_detail(o.attempt)
        else:
            if isinstance(o, Failed):
                cur = conn.execute(q["fail_job"], {**base, **F_FAIL.params})
                event, info = F_FAIL.event, detail(attempt=o.attempt, error_code=o.error_code)
            else:
                params = {**base, **F_RETRY_LATER.params, "retry_at": o.retry_at}
                cur = conn.execute(q["schedule_retry"], params)
                event = F_RETRY_LATER.event
                info = detail(
                    attempt=o.attempt, error_code=o.error_code, delay=round(o.retry_delay, 3)
                )
            status = AttemptStatus.FAILED
            if cur.rowcount == 1 and o.traceback:
                blob = {"job_id": o.job_id, "kind": "traceback", "body": o.traceback, "now": now}
                ref = f"blob:{conn.execute(q['insert_blob'], blob).fetchone()[0]}"  # id
        if cur.rowcount != 1:
            return False
        attempts.append(
            [o.job_id, o.attempt, status.value, o.started_at, o.error_code, o.error_detail, ref]
        )
        events.append([o.job_id, now, event, actor, info])
        return True

    # -- while running ---------------------------------------------------------------------

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
                    event_row(j, now, Event.HEARTBEAT, worker_id, None)
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
            return [r["id"] for r in self._dicts(cur)]


def _check_held(outcomes: Sequence[Outcome], held: Sequence[ClaimedJob] | None) -> None:
    if held is not None and len(held) != len(outcomes):
        raise ValueError(
            f"finish was given {len(held)} claimed jobs for {len(outcomes)} outcomes: pass "
            "one per outcome, in the same order, or none"
        )


def _once_each(succeeded: Sequence[Succeeded], done: set[tuple[int, int]]) -> bool:
    """Whether no attempt's success is in the batch twice (the rows count a job once; a
    repeated success would be counted twice in Python). Only the other outcomes can be
    refused by their own statement, so a repeat shows as fewer successes applied."""
    if len(done) == len(succeeded):
        return True
    return len({(o.job_id, o.attempt) for o in succeeded}) == len(succeeded)


def _ended(outcomes: Sequence[Outcome], applied: Sequence[bool]) -> list[Outcome]:
    """The outcomes that ended an attempt (a released attempt never ran; a suspended one
    gave its attempt back)."""
    return [
        o
        for o, ok in zip(outcomes, applied, strict=True)
        if ok and not isinstance(o, Released | Suspended)
    ]
