"""The flow-control noun: paused queues, limits and the limited claim, progress
(docs/flow-control.md).

Queries: ``flow.sql``. The limited claim (``_claim_limited``) runs inside the claim's own
write transaction, which is what makes a limit exact:

* SQLite: every write is ``BEGIN IMMEDIATE``, so no other claim of the database runs between
  this claim's counts and its commit (``limited_groups`` returns every group it finds).
* PostgreSQL: ``limited_groups`` takes a transaction-level advisory lock per key and group
  (try-lock: a group another claim holds is passed over this time, never waited for, so no
  deadlock), in a statement before the counts; each later statement of this transaction takes a new
  snapshot under READ COMMITTED, so the counts see every claim of that group that committed
  before the lock was granted, and no claim of it can commit until this one does.

What is counted is the jobs table itself (``status = 'running'`` with that key and group): only
a claim makes a limited job running, and a finish, a cancel, a release or a lease recovery
makes it stop — each a fenced transition, so a stale worker's refused outcome changes no row
and can free nothing, twice or once. A killed worker's jobs keep counting until the rescuer
recovers their leases.

Rate windows count handler starts (docs/flow-control.md), ``limit_starts`` rows. A handler
starts after its claim (it waits for a runner, or in the prefetch), so the claim writes the
latest moment it may start — the claim's time plus the lease; the worker hands back a
rate-limited job it could not start by then (worker/executor.py) — and the worker's outcome
batch moves the row to the handler's real start (``_handler_starts``). A stored start is
never earlier than the real one, so a claim that counts the rows of its window counts every
handler start that window can hold: no window of handler starts exceeds the rate.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..core.states import AttemptStatus
from ..errors import ConfigurationError
from .activity import write_audit
from .base import Audit, ClaimedJob, ClaimRequest, LimitSpec, Outcome, Released
from .fair import Candidate, FairPlan, SQLFair
from .host import IN_ORDER, RUNNING, T_CLAIM, WORK, Conn, SQLHost, column_index, dumps, event_of
from .order import SQLOrder

# Groups visited per claim: bounds a claim's work when many groups wait (each visit is a few
# index probes). The skip scan takes them in key order; past this many, the next claim of
# this backend resumes after the last group visited and wraps round at the end, so with G
# groups waiting every one is visited within ceil(G / MAX_GROUPS) claims
# (docs/flow-control.md, "Many groups").
MAX_GROUPS = 1000
CLAIMED = event_of("claim")
TRIM_MARGIN = 300.0  # seconds of starts kept beyond a rate's window: see _headroom


class SQLFlow(SQLFair, SQLOrder, SQLHost):
    """Pauses, limits, progress; and the limited half of the claim (its fair turns:
    fair.py; its ordered heads: order.py)."""

    # Where the last claim's scan of waiting groups stopped, when it stopped short of the
    # end (MAX_GROUPS): this process's next claim resumes there. Per backend object, not
    # stored: each worker rotates on its own, and a restart only begins again at the first.
    _group_cursor: tuple[str, str] | None = None

    # -- pause / resume --------------------------------------------------------------------

    def pause_queue(
        self, queue: str, reason: str | None, actor: str, now: float, *, audit: Audit | None = None
    ) -> None:
        params = {"queue": queue, "reason": reason, "actor": actor, "now": now}
        with self._write("pause") as conn:
            conn.execute(self.q["pause_queue"], params).fetchall()
            write_audit(conn, self.q, audit, None)

    def resume_queue(self, queue: str, *, audit: Audit | None = None) -> list[str]:
        """Resume ``queue`` ('*': every queue); the queues whose pause was lifted."""
        with self._write("resume") as conn:
            if queue == "*":
                cur = conn.execute(self.q["resume_all_queues"], {})
            else:
                cur = conn.execute(self.q["resume_queue"], {"queue": queue})
            resumed = [r[0] for r in cur.fetchall()]
            if resumed:
                self._woke(conn, WORK)
            write_audit(conn, self.q, audit, resumed)
        return resumed

    def paused_queues(self) -> list[dict[str, Any]]:
        rows = self._fetch("paused_queues")
        for r in rows:
            r["paused_at"] = self._epoch(r["paused_at"])
        return rows

    def active_queue_counts(self) -> list[dict[str, Any]]:
        return self._fetch("active_queue_counts")

    # -- limits ----------------------------------------------------------------------------

    def register_limits(
        self, limits: Sequence[LimitSpec], now: float, alive_seconds: float = 0.0
    ) -> None:
        """Store the code's limits. With ``alive_seconds``, a key whose stored code caps
        differ from these and were declared (or refreshed) by a worker seen in the last
        ``alive_seconds`` is refused (ConfigurationError naming both): processes must agree
        (docs/flow-control.md). An older declaration is replaced."""
        if not limits:
            return
        q = self.q
        with self._write("register_limits") as conn:
            for spec in limits:
                caps = {**_caps(spec), "now": now}
                if conn.execute(q["insert_code_limit"], caps).fetchall():
                    continue  # the first declaration of this key
                row = conn.execute(q["code_limit"], {"key": spec.key}).fetchone()
                stored = (row[0], row[1], row[2])
                seen = self._epoch(row[3])
                mine = (spec.running, spec.rate_count, spec.rate_seconds)
                if (
                    alive_seconds > 0
                    and stored != (None, None, None)
                    and _differ(stored, mine)
                    and seen is not None
                    and seen >= now - alive_seconds
                ):
                    raise ConfigurationError(_conflict(spec.key, mine, stored, now - seen))
                conn.execute(q["register_code_limit"], caps)

    def refresh_limits(self, limits: Sequence[LimitSpec], now: float) -> list[str]:
        """A live worker's heartbeat: its declarations are seen now. Returns the keys
        whose stored code caps are no longer these (another worker's replaced them)."""
        if not limits:
            return []
        stale = []
        with self._write("refresh_limits") as conn:
            for spec in limits:
                params = {**_caps(spec), "now": now}
                if not conn.execute(self.q["refresh_code_limit"], params).fetchall():
                    stale.append(spec.key)
        return stale

    def set_limit(
        self, spec: LimitSpec, actor: str, now: float, *, audit: Audit | None = None
    ) -> None:
        with self._write("set_limit") as conn:
            conn.execute(self.q["set_limit"], {**_caps(spec), "now": now, "actor": actor})
            self._woke(conn, WORK)  # a raised cap may let held jobs start
            write_audit(conn, self.q, audit, None)

    def clear_limit(self, key: str, *, audit: Audit | None = None) -> bool:
        with self._write("clear_limit") as conn:
            cleared = bool(conn.execute(self.q["clear_limit"], {"key": key}).fetchall())
            if cleared:
                self._woke(conn, WORK)
            write_audit(conn, self.q, audit, cleared)
        return cleared

    def limit_caps(self) -> list[dict[str, Any]]:
        rows = self._fetch("limit_caps")
        for r in rows:
            r["code_seen_at"] = self._epoch(r["code_seen_at"])
            r["set_at"] = self._epoch(r["set_at"])
        return rows

    def limit_usage(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """(running, queued) counts per key and group (a group an older errands stored as
        text that is not UTF-8 reads with U+FFFD: backends/sqlite_text.py)."""
        with self._read_rows() as conn:
            running = self._dicts(conn.execute(self.q["limit_running_counts"], {}))
            queued = self._dicts(conn.execute(self.q["limit_queued_counts"], {}))
        return running, queued

    # -- progress --------------------------------------------------------------------------

    def record_progress(
        self,
        worker_id: str,
        job_id: int,
        attempt: int,
        progress: float,
        message: str | None,
        now: float,
    ) -> bool:
        params = {
            "job_id": job_id,
            "attempt": attempt,
            "from_state": RUNNING,
            "worker_id": worker_id,
            "progress": progress,
            "message": message,
            "now": now,
        }
        with self._write("progress") as conn:
            return bool(conn.execute(self.q["record_progress"], params).rowcount == 1)

    # -- the limited claim -----------------------------------------------------------------

    def _claim_limited(
        self, conn: Conn, request: ClaimRequest, params: dict[str, Any], now: float
    ) -> tuple[list[Any], dict[str, int]]:
        """The claim of a worker some of whose types are limited, in the caller's write
        transaction: per key and group with headroom, that group's best due jobs up to it,
        weighed with the best unlimited jobs; then the best ``limit`` of them all by
        priority, run_at, id. A saturated group costs one index probe and reads none of its
        jobs; with no limited job claimable the plain claim runs (one statement more than a
        worker without limits: the groups' probe)."""
        q = self.q
        limit = request.limit
        tops: dict[tuple[str, str], int] = {}  # each group's highest priority
        groups = self._limited_groups(conn, tops)
        order = request.order
        headroom = self._fair_headroom(conn, groups, {*request.fair, *order})
        rest = [g for g in groups if g not in headroom]
        headroom.update(self._headroom(conn, rest, now) if rest else {})
        base = {"now": now, "types": params["types"], "queues": params["queues"]}
        limited: list[tuple[int, int, Any]] = []
        rated: set[tuple[str, str]] = set()
        fair = request.fair
        fair_rooms: dict[str, dict[str, tuple[int, int]]] = {}
        # Of an ordered value only its head may start, and only when it is due (order.py).
        ordered = [g for g, (room, _) in headroom.items() if g[0] in order and room > 0]
        heads = self._order_heads(conn, ordered, order, base) if ordered else {}
        fair_heads: dict[str, dict[str, Candidate]] = {}
        for (key, grp), (room, has_rate) in headroom.items():
            if room <= 0:
                continue  # a capped group is not eligible: the turn passes it by
            if key in order:
                head = heads.get((key, grp))
                if head is None:
                    continue  # its head is running, not due, waiting or blocking
                if key in fair:
                    fair_rooms.setdefault(key, {})[grp] = (1, head[1])
                    fair_heads.setdefault(key, {})[grp] = head
                else:
                    limited.append(head)
                if has_rate:
                    rated.add((key, grp))
                continue
            if key in fair:
                fair_rooms.setdefault(key, {})[grp] = (room, tops.get((key, grp), 0))
                if has_rate:
                    rated.add((key, grp))
                continue
            due = conn.execute(
                q["limited_due"], {**base, "key": key, "grp": grp, "n": min(room, limit)}
            ).fetchall()
            if due and has_rate:
                rated.add((key, grp))
            limited.extend((r[0], r[1], r[2]) for r in due)
        ep = self._epoch
        plans = [
            self._fair_picks(conn, key, rooms, fair[key], base, limit, fair_heads.get(key))
            for key, rooms in sorted(fair_rooms.items())
        ]
        ranked = [(-c[1], ep(c[2]) or 0.0, c[0], c[0]) for c in limited]
        for plan in plans:
            ranked.extend(_in_turn(plan, ep))
        if not ranked:  # nothing limited may start: the plain claim of unlimited jobs
            return self._claim_rows(conn, params, now)
        ranked.extend(
            (-r[1], ep(r[2]) or 0.0, r[0], r[0])
            for r in conn.execute(q["unlimited_due"], {**base, "n": limit}).fetchall()
        )
        ranked.sort()
        chosen = ranked[:limit]
        ids = [c[3] for c in chosen]
        rows, col = self._claim_chosen(conn, request, ids, plans, rated, now)
        if not rows:
            return [], {}
        i_id, i_key, i_grp = col["id"], col["limit_key"], col["limit_group"]
        # In the order chosen (RETURNING's is the table's): the worker starts them in it.
        place = {job_id: n for n, job_id in enumerate(ids)}
        rows.sort(key=lambda r: place[r[i_id]])
        col = {**col, IN_ORDER: -1}
        rated_ids = {r[i_id] for r in rows if (r[i_key], r[i_grp]) in rated}
        if rated_ids:  # marks the rate-counted jobs (ClaimedJob.claimed_at, read by _claimed)
            rows = [(*r, now if r[i_id] in rated_ids else None) for r in rows]
            col = {**col, "claimed_at": len(rows[0]) - 1}
        return rows, col

    def _claim_chosen(
        self,
        conn: Conn,
        request: ClaimRequest,
        ids: list[int],
        plans: Sequence[FairPlan],
        rated: set[tuple[str, str]],
        now: float,
    ) -> tuple[list[Any], dict[str, int]]:
        """Claim the chosen jobs (``ids``) still queued, with their attempt rows, CLAIMED
        events, the starts of the rate-counted groups' (``rated``) and the fair turns
        (``plans``) they served; claim_ids' rows, in the table's order. A statement each;
        PostgreSQL writes them all in one (backends/pg_claim.py)."""
        q = self.q
        claim = {
            "to_state": T_CLAIM.target.value,
            "worker_id": request.worker_id,
            "now": now,
            "lease_seconds": request.lease_seconds,
            "job_ids": dumps(ids),
        }
        cur = conn.execute(q["claim_ids"], claim)
        rows: list[Any] = cur.fetchall()
        if not rows:
            return [], {}
        col = column_index(cur)
        i_id, i_key, i_grp = col["id"], col["limit_key"], col["limit_group"]
        if plans:
            self._fair_served(conn, plans, {r[i_id] for r in rows})
        claimed = dumps([r[i_id] for r in rows])
        running = AttemptStatus.RUNNING.value
        conn.execute(q["open_attempts"], {"job_ids": claimed, "now": now, "status": running})
        if CLAIMED in self._audit:
            event = {"job_ids": claimed, "now": now, "event": CLAIMED.value}
            conn.execute(q["insert_claimed_events"], event)
        starts = [[r[i_key], r[i_grp], r[i_id]] for r in rows if (r[i_key], r[i_grp]) in rated]
        if starts:
            latest = now + request.lease_seconds  # see the module's docstring
            conn.execute(q["record_limit_starts"], {"rows": dumps(starts), "started_at": latest})
        return rows, col

    def _limited_groups(
        self, conn: Conn, tops: dict[tuple[str, str], int]
    ) -> list[tuple[str, str]]:
        """Up to MAX_GROUPS keys and groups with waiting jobs (on PostgreSQL, each locked),
        from where this backend's previous scan stopped, wrapping round to the first; each
        one's highest priority into ``tops``."""
        query = self.q["limited_groups"]
        after = self._group_cursor
        key, grp = after or (None, None)
        params: dict[str, Any] = {"max_groups": MAX_GROUPS, "after_key": key, "after_grp": grp}
        rows = conn.execute(query, params).fetchall()
        groups = [(r[0], r[1]) for r in rows]
        tops.update(((r[0], r[1]), r[2]) for r in rows)
        if after is not None and len(groups) < MAX_GROUPS:  # the end: wrap round
            seen = set(groups)
            params.update(max_groups=MAX_GROUPS - len(groups), after_key=None, after_grp=None)
            for r in conn.execute(query, params).fetchall():
                if (r[0], r[1]) not in seen:
                    groups.append((r[0], r[1]))
                    tops[(r[0], r[1])] = r[2]
        self._group_cursor = groups[-1] if len(groups) >= MAX_GROUPS else None
        return groups

    def record_starts(self, starts: Sequence[tuple[int, float, float]]) -> None:
        """The real starts of rate-limited handlers still running (the worker, with its
        heartbeat), replacing the latest start their claims recorded."""
        if starts:
            rows = [[job_id, claimed, max(started, claimed)] for job_id, claimed, started in starts]
            with self._write("record_starts") as conn:
                conn.execute(self.q["record_handler_starts"], {"rows": dumps(rows)})

    def _handler_starts(
        self, conn: Conn, outcomes: Sequence[Outcome], held: Sequence[ClaimedJob]
    ) -> None:
        """In the outcome batch's transaction: the rate-limited attempts' real handler
        starts replace the latest start their claim recorded (one statement, none when the
        batch holds no rate-limited job)."""
        rows = [
            [h.id, h.claimed_at, max(o.started_at, h.claimed_at)]
            for o, h in zip(outcomes, held, strict=True)
            if h.claimed_at is not None and not isinstance(o, Released)
        ]
        if rows:
            conn.execute(self.q["record_handler_starts"], {"rows": dumps(rows)})

    def _headroom(
        self, conn: Conn, groups: list[tuple[str, str]], now: float
    ) -> dict[tuple[str, str], tuple[int, bool]]:
        """Per locked group: how many more may start now (a large number: no cap), and
        whether a rate counts its starts. One statement, plus two per rate-limited key."""
        q = self.q
        rows = conn.execute(q["limit_headroom"], {"groups": dumps(groups)}).fetchall()
        started: dict[tuple[str, str], int] = {}
        windows = {r[0]: float(r[5]) for r in rows if r[4] is not None and r[5] is not None}
        for key, seconds in windows.items():
            since = now - seconds
            # Trimmed well behind the window: another claim's ``now`` may be older than this
            # one's (read before it waited for the write lock, or another host's clock), and
            # must still count every start its own window holds.
            conn.execute(q["trim_limit_starts"], {"key": key, "since": since - TRIM_MARGIN})
            for r in conn.execute(q["limit_starts_counts"], {"key": key, "since": since}):
                started[(key, r[0])] = int(r[1])
        out: dict[tuple[str, str], tuple[int, bool]] = {}
        for key, grp, running, cap, rate_count, _ in rows:
            room = 1 << 30  # no limit known for this key (no worker declared it): no cap
            if cap is not None:
                room = min(room, int(cap) - int(running))
            has_rate = key in windows
            if has_rate:
                room = min(room, int(rate_count) - started.get((key, grp), 0))
            out[(key, grp)] = (room, has_rate)
        return out


def _in_turn(plan: FairPlan, ep: Any) -> list[tuple[int, float, int, int]]:
    """A fair key's picks ranked among the other candidates (priority, then due time) without
    changing their order: each takes, per priority, the earliest due time of the picks from
    it on — a sequence that never decreases, so a sort keeps the turns' order."""
    out: list[tuple[int, float, int, int]] = []
    earliest: dict[int, float] = {}
    for seq in range(len(plan.picks) - 1, -1, -1):
        job = plan.picks[seq].job
        at = min(ep(job[2]) or 0.0, earliest.get(job[1], float("inf")))
        earliest[job[1]] = at
        out.append((-job[1], at, -(1 << 62) + seq, job[0]))
    out.reverse()
    return out


def _differ(stored: tuple[Any, Any, Any], mine: tuple[Any, Any, Any]) -> bool:
    running, count, seconds = stored
    return (
        running != mine[0]
        or count != mine[1]
        or (seconds is None) != (mine[2] is None)
        or (seconds is not None and float(seconds) != mine[2])
    )


def _conflict(
    key: str, mine: tuple[Any, Any, Any], stored: tuple[Any, Any, Any], ago: float
) -> str:
    return (
        f"Limit({key!r}): this worker declares {_describe(mine)}, but a worker seen "
        f"{max(ago, 0.0):.0f}s ago declared {_describe(stored)}; every process must declare "
        "the same caps for a key. Deploy one value (stop the workers running the other, then "
        "start these once a lease has passed), or change it at runtime with "
        f"`errands limit set {key}`"
    )


def _describe(caps: tuple[Any, Any, Any]) -> str:
    running, count, seconds = caps
    parts = [] if running is None else [f"running={running}"]
    if count is not None:
        parts.append(f"rate=({count}, {float(seconds):g})")
    return ", ".join(parts) or "no caps"


def _caps(spec: LimitSpec) -> dict[str, Any]:
    return {
        "key": spec.key,
        "running": spec.running,
        "rate_count": spec.rate_count,
        "rate_seconds": spec.rate_seconds,
    }
