"""PostgreSQL's claims in one statement each (sql/postgres/own.sql), bound on
PostgresBackend in place of the shared sequences of statements (SQLite keeps those: in-process,
a statement costs no round trip): the plain claim writes its jobs, their attempt rows and their
CLAIMED events together (``claim_recorded``); the limited claim, once it has chosen its jobs,
writes those with the rate-counted starts and the fair turns they served
(``claim_ids_recorded``) — one round trip and one parse of the ids where it made six."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..core.states import AttemptStatus
from .base import ClaimRequest
from .claim_position import ClaimScans
from .fair import FairPlan, SQLFair
from .host import T_CLAIM, Conn, column_index, dumps
from .jobs import CLAIMED


class PostgresClaim(ClaimScans, SQLFair):
    """The plain claim (``claim_recorded``) and the limited claim's writes
    (``claim_ids_recorded``, in place of SQLFlow._claim_chosen)."""

    def _claim_rows(
        self, conn: Conn, params: dict[str, Any], now: float
    ) -> tuple[list[Any], dict[str, int]]:
        # One statement (own.sql) instead of claim, open_attempts and insert_claimed_events:
        # two round trips fewer per claim. The audit setting travels as :event (NULL: none).
        event = CLAIMED.value if CLAIMED in self._audit else None
        cur = conn.execute(
            self.q["claim_recorded"],
            {**params, "status": AttemptStatus.RUNNING.value, "event": event},
        )
        rows: list[Any] = cur.fetchall()
        if not rows:
            return [], {}
        col = column_index(cur)
        i_prio, i_run, i_id, ep = col["priority"], col["run_at"], col["id"], self._epoch
        found = [(r[i_prio], ep(r[i_run]) or 0.0, r[i_id]) for r in rows]
        self.claim_position.claimed(params["types"], params["queues"], now, found)
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
        # A fair job's key and value are its limit_key and limit_group (errands/fair.py).
        picks = {p.job[0]: [p.start, p.finish] for plan in plans for p in plan.picks}
        groups: dict[str, dict[str, int]] = {}
        for key, grp in rated:
            groups.setdefault(key, {})[grp] = 1
        params = {
            "to_state": T_CLAIM.target.value,
            "worker_id": request.worker_id,
            "now": now,
            "lease_seconds": request.lease_seconds,
            "job_ids": dumps(ids),
            "status": AttemptStatus.RUNNING.value,
            "event": CLAIMED.value if CLAIMED in self._audit else None,
            "rated": dumps(groups),
            "started_at": now + request.lease_seconds,  # see flow.py's docstring
            "picks": dumps(picks),
        }
        cur = conn.execute(self.q["claim_ids_recorded"], params)
        rows: list[Any] = cur.fetchall()
        if not rows:
            return [], {}
        col = column_index(cur)
        if plans:  # written by the statement; counted here, and trimmed now and then
            i_id = col["id"]
            self._fair_served(conn, plans, {r[i_id] for r in rows}, written=True)
        return rows, col
