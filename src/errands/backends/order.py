"""Order per key: the heads the limited claim takes among the values of an ordered key
(docs/flow-control.md, "Order per key"; queries: ``order.sql``).

An ordered task's jobs are limited jobs whose group is their value (errands/order.py), so
the claim's skip scan finds every value with jobs waiting. Of each, the claim may start only
the head: the lowest-id job of the value that is queued (due or not), running or waiting —
with ``order_on_failure="block"``, failed too. A value whose head is running, not due yet
(a retry's backoff, a snooze, a sleep), waiting, failed (block) or of another worker's types
starts nothing; one head at a time is also what keeps one job of a value running. Each value
is probed on its own, so a stuck value costs its probe and never delays another.

Cost per claim: one statement per ordered value with jobs queued (one seek: the value's
first entry in jobs_order_head, its unfinished jobs by id), and one more per value of a
blocking key (its failed jobs, found through the finished jobs' index). On PostgreSQL the
group's advisory lock (limited_groups) serialises the claims of one value, so two claims
never both take its head.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from .host import Conn, SQLHost, dumps

Candidate = tuple[int, int, Any]  # (id, priority, run_at) as limited_due reads them
MAX_CHECKED = 1000  # values `errands check` looks at per call


class Head(NamedTuple):
    """A value's head: its job (id, priority, run_at), whether this claim may start it now,
    and whether it is a failed job holding the value back (``order_on_failure="block"``)."""

    job: Candidate
    ready: bool
    failed: bool


class SQLOrder(SQLHost):
    """The ordered half of the limited claim (bound on SQLBackend through SQLFlow)."""

    def _order_head(
        self, conn: Conn, key: str, grp: str, blocks: bool, base: Mapping[str, Any]
    ) -> Head | None:
        """The head of value ``grp`` of ordered ``key`` (None: nothing unfinished); with
        ``blocks``, a failed job counts."""
        q = self.q
        params = {**base, "key": key, "grp": grp}
        row = conn.execute(q["order_head"], params).fetchone()
        head = None if row is None else Head((row[0], row[1], row[2]), bool(row[4]), False)
        if blocks:
            failed = conn.execute(q["order_failed_head"], params).fetchone()
            if failed is not None and failed[0] is not None:
                if head is None or failed[0] < head.job[0]:
                    return Head((failed[0], 0, None), False, True)
        return head

    def _order_heads(
        self,
        conn: Conn,
        groups: Sequence[tuple[str, str]],
        order: Mapping[str, bool],
        base: Mapping[str, Any],
    ) -> dict[tuple[str, str], Candidate]:
        """The heads of ``groups`` (of ordered keys) that this claim may start now: a value
        whose head is running, not due, waiting, failed (block), of types this worker does
        not run, starts nothing this time."""
        out: dict[tuple[str, str], Candidate] = {}
        for key, grp in groups:
            head = self._order_head(conn, key, grp, order[key], base)
            if head is not None and head.ready:
                out[(key, grp)] = head.job
        return out

    def order_blocked(self, keys: Sequence[str], now: float) -> list[dict[str, Any]]:
        """The values of ordered ``keys`` (keys whose failed heads block) held back by a
        failed head: key, value and the head's id (at most MAX_CHECKED values looked at)."""
        if not keys:
            return []
        out = []
        base = {"now": now, "types": self._list([]), "queues": None}
        params = {"keys": dumps(sorted(set(keys))), "n": MAX_CHECKED}
        with self._read_rows() as conn:
            groups = [(r[0], r[1]) for r in conn.execute(self.q["order_queued_groups"], params)]
            for key, grp in groups:
                head = self._order_head(conn, key, grp, True, base)
                if head is not None and head.failed:
                    out.append({"key": key, "value": grp, "head_id": head.job[0]})
        return out
