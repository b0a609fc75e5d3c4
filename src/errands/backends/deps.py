"""The dependencies noun: jobs enqueued after others, and their release (docs/pipelines.md).

Queries: ``deps.sql``. A job enqueued ``after=[…]`` is ``waiting``, with one ``job_deps`` row
per upstream, written in the enqueue's transaction. An edge is *open* while its upstream is
not final; ``upstream_status`` records the final state it reached.

Where the release happens: in the transaction that makes an upstream final — every such
write calls ``_release`` (the worker's outcome batch, ``complete_in``, an operator's cancel,
the rescue of a last lost attempt, and the release itself, for the dependents it cancels).
``_release`` closes the upstream's open edges (``close_edges``), then looks only at the
dependents those edges lead to: one with no open edge left is queued (``READY``), or
cancelled with ``UPSTREAM:FAILED`` when an upstream it needed to succeed did not; a cancelled
dependent is final in its turn, so the same loop closes its edges (a cascade down a chain).

Why it cannot happen twice: the move out of ``waiting`` is fenced on ``status = 'waiting'``
(``release_waiting``/``cancel_waiting_jobs``), so whichever transaction applies it, it applies
once; the ``READY`` event is written for the rows it returned only.

Why it cannot be missed: the edge is closed in the same transaction as the outcome, so an
upstream is final exactly when its edges are closed (the sweeper repairs the case by hand).
A dependent is checked whenever one of its edges closes. On SQLite one writer at a time sees
every earlier commit. On PostgreSQL two transactions closing a dependent's last two edges
could each see the other's edge open; ``lock_waiting`` locks the dependent first, so the
second waits for the first to commit and its next statement sees both closed. An enqueue
reads its upstreams ``FOR SHARE``: an upstream finishing meanwhile is read once it commits
(its edge is written closed), and one read first cannot finish until the enqueue commits (its
outcome's ``close_edges`` then sees the new edge).

Cost: ``close_edges`` is one statement per outcome batch, an index probe per job (nothing
depends on most jobs); a dependent's readiness is one probe of the partial index of open
edges, so a callback after 10,000 members never rescans the finished ones, and no counter
row is shared by the members' outcomes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, cast

from ..core.records import Job
from ..core.states import TERMINAL, Event, State
from ..errors import JobNotFoundError
from . import figures
from .activity import write_audit
from .base import Audit, Needs, NewJob, SweepReport
from .host import (
    ALL,
    DONE,
    EXEC,
    F_CANCEL_UPSTREAM,
    F_READY,
    F_REVIVE,
    T_ENQUEUE_WAITING,
    UPSTREAM_FAILED,
    WORK,
    Conn,
    SQLHost,
    Step,
    Steps,
    detail,
    drive,
    dumps,
)
from .job_rows import insert_params

FINAL = frozenset(s.value for s in TERMINAL)
SUCCEEDED = State.SUCCEEDED.value
DETAIL_IDS = 50  # ids listed in a WAITING event's detail (a batch callback's may be many)


class JobsNoun(Protocol):
    """What the dependencies need of the jobs noun beyond ``SQLHost``: its insert as steps
    (``jobs.SQLJobs._insert_steps``, which a dialect specialises) and its row mapping."""

    def _insert_steps(self, jobs: Sequence[NewJob], now: float, actor: str) -> Steps[list[int]]: ...
    def _insert_batched_steps(
        self,
        jobs: Sequence[NewJob],
        now: float,
        actor: str,
        to_state: str = ...,
        event: Event | None = ...,
    ) -> Steps[list[int]]: ...
    def _job(self, r: dict[str, Any]) -> Job: ...


class SQLDeps(SQLHost):
    """Jobs after jobs: the enqueue, the release, the graph, the sweeper."""

    # -- enqueue ---------------------------------------------------------------------------

    def enqueue_after(
        self,
        jobs: Sequence[NewJob],
        needs: Sequence[Needs | None],
        now: float,
        *,
        actor: str,
        connection: Any = None,
        audit: Audit | None = None,
    ) -> list[int]:
        """Enqueue jobs some of which wait for others (``needs[i]`` for ``jobs[i]``; None:
        a plain job), in one transaction: every job, every edge, or none (and the activity
        row of an enqueue by hand, ``audit``)."""
        steps = self._woken(self._insert_after_steps(jobs, needs, now, actor))
        with self._write("enqueue") if connection is None else self._user_conn(connection) as conn:
            ids = drive(conn, steps)
            if audit is not None:
                write_audit(conn, self.q, audit, ids)
            return ids

    def _woken(self, steps: Steps[list[int]]) -> Steps[list[int]]:
        """``steps``, then the wake-up where the dialect's insert sends none (a chain's or a
        batch's first jobs are due at once)."""
        ids = yield from steps
        if ids and not self.inserts_wake:
            wake = self._woke_step(WORK)
            if wake is not None:
                yield wake
        return ids

    def _insert_after_steps(
        self, jobs: Sequence[NewJob], needs: Sequence[Needs | None], now: float, actor: str
    ) -> Steps[list[int]]:
        q = self.q
        named = sorted({i for n in needs if n is not None for i in n.ids})
        states: dict[int, str] = {}
        if named:  # read (PostgreSQL: share-locked) before anything is written
            rows = yield Step(q["upstream_states"], {"job_ids": self._list(named)}, ALL)
            states = {int(r[0]): r[1] for r in rows}
            missing = [i for i in named if i not in states]
            if missing:
                shown = ", ".join(map(str, missing[:10])) + (" …" if len(missing) > 10 else "")
                raise JobNotFoundError(
                    f"after= names no such job ({shown}): a job can only follow jobs that "
                    "exist (list them with `errands jobs`) — nothing was enqueued"
                )
        ids: list[int] = []
        fresh: set[int] = set()
        waiting: list[tuple[int, Needs]] = []
        i = 0
        while i < len(jobs):
            if needs[i] is None:  # a run of plain jobs: the jobs noun's own (batched) insert
                j = i
                while j < len(jobs) and needs[j] is None:
                    j += 1
                new = yield from cast(JobsNoun, self)._insert_steps(jobs[i:j], now, actor)
                ids.extend(new)
                # A job with a unique key may be an existing one: its state is read below.
                fresh.update(
                    n for n, jb in zip(new, jobs[i:j], strict=True) if jb.unique_key is None
                )
                i = j
                continue
            j = i
            while j < len(jobs) and needs[j] is not None and _plain(jobs[j]):
                j += 1
            if j - i > 1:  # a run of waiting jobs (the downs of many pairs): one statement
                waits = T_ENQUEUE_WAITING.target.value
                insert = cast(JobsNoun, self)._insert_batched_steps
                new = yield from insert(jobs[i:j], now, actor, waits, None)
                ids.extend(new)
                fresh.update(new)
                waiting.extend((n, need) for n, need in zip(new, needs[i:j], strict=True) if need)
                i = j
                continue
            job, need = jobs[i], needs[i]
            assert need is not None
            row = yield Step(q["insert_job"], _job_params(job, now))
            if row is None:  # a job holds this unique_key: that job, no new edges
                held = {"unique_key": job.unique_key, "now": now}
                ids.append((yield Step(q["active_job_by_unique_key"], held))[0])
            else:
                ids.append(row[0])
                fresh.add(row[0])
                waiting.append((row[0], need))
            i += 1
        if not waiting:
            return ids
        edges: list[list[Any]] = []
        events: list[list[Any]] = []
        graph = [
            (job_id, need, list(dict.fromkeys([*need.ids, *(ids[k] for k in need.earlier)])))
            for job_id, need in waiting
        ]
        # An earlier job of this enqueue that a unique key resolved to an existing job: read
        # its state as for a named upstream.
        unread = sorted({u for _, _, ups in graph for u in ups} - fresh - states.keys())
        if unread:
            rows = yield Step(q["upstream_states"], {"job_ids": self._list(unread)}, ALL)
            states.update((int(r[0]), r[1]) for r in rows)
        for job_id, need, ups in graph:
            for up in ups:
                state = states.get(up)
                edges.append([job_id, up, need.on_failure, state if state in FINAL else None])
            # {"after":[ids]} (and "count" past DETAIL_IDS), written out: one per new job.
            listed = ",".join(map(str, ups[:DETAIL_IDS]))
            more = "" if len(ups) <= DETAIL_IDS else f',"count":{len(ups)}'
            info = f'{{"after":[{listed}]{more}}}'
            events.append([job_id, now, T_ENQUEUE_WAITING.event, actor, info])
        yield Step(q["insert_deps"], {"rows": dumps(edges)}, EXEC)
        if events and T_ENQUEUE_WAITING.event in self._audit:
            yield Step(q["insert_events"], {"rows": dumps(events)}, EXEC)
        # Upstreams already final count at once: settle the new dependents with none open
        # (the rest, the common case, wait for an outcome: no statement for them).
        candidates = [
            job_id for job_id, _, ups in graph if all(states.get(u) in FINAL for u in ups)
        ]
        if candidates:
            yield from self._release_steps([], now, actor, candidates)
        return ids

    # -- the release: inside the transaction that made jobs final --------------------------

    def _release(self, conn: Conn, job_ids: Sequence[int], now: float, actor: str) -> None:
        if job_ids:
            drive(conn, self._release_steps(job_ids, now, actor))

    def _release_steps(
        self,
        final: Sequence[int],
        now: float,
        actor: str,
        candidates: Sequence[int] = (),
        settled: list[int] | None = None,
    ) -> Steps[None]:
        """Close the edges of the ``final`` jobs and settle the dependents they lead to
        (and ``candidates``); the dependents this cancels are final too: repeat."""
        q = self.q
        by: dict[int, int] = {}  # dependent -> the upstream whose outcome settled it
        pending = list(candidates)
        frontier = list(final)
        while frontier or pending:
            if frontier:
                rows = yield Step(q["close_edges"], {"job_ids": self._list(frontier)}, ALL)
                for dep, up in rows:
                    by[int(dep)] = int(up)
                    pending.append(int(dep))
            frontier = []
            if pending:
                frontier = yield from self._settle_steps(
                    sorted(set(pending)), now, actor, by, settled
                )
                pending = []
            if frontier:  # whole chains below the cancelled ones at once (doomed_chains)
                frontier += yield from self._cancel_chains(frontier, now, actor, by, settled)

    def _settle_steps(
        self,
        candidates: list[int],
        now: float,
        actor: str,
        by: dict[int, int],
        settled: list[int] | None,
    ) -> Steps[list[int]]:
        """Release or cancel the candidates that are waiting with no open edge; returns the
        ones cancelled (final now: their own dependents are next)."""
        q = self.q
        if self.concurrent_writers:
            locked = yield Step(q["lock_waiting"], {"job_ids": self._list(candidates)}, ALL)
            if not locked:
                return []
            candidates = [r[0] for r in locked]
        params = {"job_ids": self._list(candidates), "succeeded": SUCCEEDED}
        rows = yield Step(q["ready_waiting"], params, ALL)
        ready = [int(r[0]) for r in rows if not r[1]]
        doomed = [int(r[0]) for r in rows if r[1]]
        events: list[list[Any]] = []
        if ready:
            params = {**F_READY.params, "now": now, "job_ids": self._list(ready)}
            done = [int(r[0]) for r in (yield Step(q["release_waiting"], params, ALL))]
            events += [[i, now, F_READY.event, actor, _by(by.get(i))] for i in done]
            wake = self._woke_step(WORK) if done else None
            if wake is not None:
                yield wake
        yield from self._events_steps(events, settled)
        return (yield from self._cancel_steps(doomed, now, actor, by, settled))

    def _cancel_chains(
        self,
        cancelled: list[int],
        now: float,
        actor: str,
        by: dict[int, int],
        settled: list[int] | None,
    ) -> Steps[list[int]]:
        """Cancel every waiting dependent down the single-upstream chains below the just
        ``cancelled`` jobs in one pass (a 3,000-step chain took 3,000 rounds of statements);
        returns them: final now, their edges close with the caller's next round."""
        q = self.q
        rows = yield Step(q["doomed_chains"], {"job_ids": self._list(cancelled)}, ALL)
        if not rows:
            return []
        for dep, up in rows:
            by[int(dep)] = int(up)
        doomed = [int(r[0]) for r in rows]
        if self.concurrent_writers:  # locked in id order, as _settle_steps does
            locked = yield Step(q["lock_waiting"], {"job_ids": self._list(doomed)}, ALL)
            doomed = [int(r[0]) for r in locked]
        return (yield from self._cancel_steps(doomed, now, actor, by, settled))

    def _cancel_steps(
        self,
        doomed: list[int],
        now: float,
        actor: str,
        by: dict[int, int],
        settled: list[int] | None,
    ) -> Steps[list[int]]:
        """Cancel these waiting dependents (``UPSTREAM:FAILED``) with their events and
        figures; returns the ones cancelled."""
        if not doomed:
            return []
        q = self.q
        params = {
            **F_CANCEL_UPSTREAM.params,
            "now": now,
            "job_ids": self._list(doomed),
            "error_code": UPSTREAM_FAILED,
            "error_detail": "an upstream job it runs after did not succeed",
        }
        cancelled = [int(r[0]) for r in (yield Step(q["cancel_waiting_jobs"], params, ALL))]
        if cancelled:
            yield from figures.count_steps(q, cancelled, cancelled)
            told = self._woke_step(DONE, cancelled)
            if told is not None:
                yield told
        events = [
            [i, now, F_CANCEL_UPSTREAM.event, actor, _by(by.get(i), UPSTREAM_FAILED)]
            for i in cancelled
        ]
        yield from self._events_steps(events, settled)
        return cancelled

    def _events_steps(self, events: list[list[Any]], settled: list[int] | None) -> Steps[None]:
        if settled is not None:
            settled.extend(e[0] for e in events)
        rows = [e for e in events if e[2] in self._audit]
        if rows:
            yield Step(self.q["insert_events"], {"rows": dumps(rows)}, EXEC)

    # -- a manual retry of an upstream -----------------------------------------------------

    def _revive(self, conn: Conn, job_ids: Sequence[int], now: float, actor: str) -> None:
        """The retried jobs' edges are open again; the dependents their outcome cancelled
        (``UPSTREAM:FAILED``) go back to waiting, and theirs in turn: the retried job's
        outcome will release or cancel them again."""
        q = self.q
        frontier = list(job_ids)
        while frontier:
            rows = conn.execute(q["reopen_edges"], {"job_ids": self._list(frontier)}).fetchall()
            deps = sorted({int(r[0]) for r in rows})
            if not deps:
                return
            params = {"job_ids": self._list(deps), "error_code": UPSTREAM_FAILED}
            left = self._dicts(conn.execute(q["cancelled_by_upstream"], params))
            if not left:
                return
            ids = [int(r["id"]) for r in left]
            figures.uncount(conn, q, ids)  # they leave a final state (as retry does)
            self._roll_up(conn, left)
            params = {**F_REVIVE.params, "job_ids": self._list(ids)}
            frontier = [int(r[0]) for r in conn.execute(q["revive_waiting"], params).fetchall()]
            if frontier and F_REVIVE.event in self._audit:
                rows_ = [[i, now, F_REVIVE.event, actor, detail(revived=True)] for i in frontier]
                conn.execute(q["insert_events"], {"rows": dumps(rows_)})

    # -- reads -----------------------------------------------------------------------------

    def upstream(self, job_id: int) -> list[tuple[Job, str]]:
        return self._edges("job_upstream", job_id)

    def downstream(self, job_id: int) -> list[tuple[Job, str]]:
        return self._edges("job_downstream", job_id)

    def _edges(self, name: str, job_id: int) -> list[tuple[Job, str]]:
        with self._read_rows() as conn:
            rows = self._dicts(conn.execute(self.q[name], {"job_id": job_id}))
        job = cast(JobsNoun, self)._job
        return [(job(r), str(r["on_failure"])) for r in rows]

    def upstream_counts(self, job_id: int) -> dict[str, int]:
        rows = self._fetch("upstream_counts", {"job_id": job_id})
        return {str(r["status"]): int(r["n"]) for r in rows}

    # -- the sweeper's repair --------------------------------------------------------------

    def unreleased(self, limit: int) -> int:
        """Waiting jobs a release missed (should be 0): open edges to final upstreams, and
        waiting jobs with no open edge."""
        stale = self._fetch("stale_edges", {"limit": limit})
        idle = self._fetch("unreleased_waiting", {"limit": limit})
        return len(stale) + len(idle)

    def sweep_waiting(self, now: float, *, limit: int = 1000) -> SweepReport:
        """Do what a missed release would have done: close the open edges of final
        upstreams and settle waiting jobs with no open edge, fenced like the release."""
        report = SweepReport()
        with self._write("sweep_waiting") as conn:
            stale = [
                int(r["upstream_id"])
                for r in self._dicts(conn.execute(self.q["stale_edges"], {"limit": limit}))
            ]
            idle = [
                int(r["id"])
                for r in self._dicts(conn.execute(self.q["unreleased_waiting"], {"limit": limit}))
            ]
            if stale or idle:
                steps = self._release_steps(stale, now, "system", idle, report.settled)
                drive(conn, steps)
                report.closed = len(stale)
        return report


def _by(upstream: int | None, error_code: str | None = None) -> str | None:
    if upstream is None and error_code is None:
        return None
    fields: dict[str, Any] = {}
    if upstream is not None:
        fields["upstream"] = upstream
    if error_code is not None:
        fields["error_code"] = error_code
    return detail(**fields)


def _plain(job: NewJob) -> bool:
    """A job the batched insert can write: no unique key to check, no headers, no rules."""
    return job.unique_key is None and job.headers is None and job.rules is None


def _job_params(job: NewJob, now: float) -> dict[str, Any]:
    return insert_params(job, now, T_ENQUEUE_WAITING.target.value)
