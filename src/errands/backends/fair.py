"""Fair share: the turns the limited claim takes among the values of a fair key
(docs/flow-control.md, "Fair share").

A fair task's jobs are limited jobs whose group is their fair value (errands/fair.py), so
the claim's skip scan already finds every value with waiting jobs, and on PostgreSQL holds
the lock of each one it will serve. Among them the claim runs start-time fair queuing with
the state stored in ``fair_turns`` / ``fair_clocks`` (queries: ``fair.sql``):

* each value has a start tag, the key has a virtual time V (the largest tag served);
* an eligible value's tag counts as ``max(tag, V)`` — a value that was idle, capped,
  rate-limited or paused comes back level with the others, never ahead by what it missed,
  and a value newly due is served within one start of each competing value;
* the next start goes to the value whose head job has the highest priority, then the
  smallest tag (then its name); serving it raises its tag by 1/weight.

Values are probed for due jobs by the highest priority they hold, then by tag, and the
claim stops after as many values with due jobs as it wants jobs: a value further on could
only be served after each of them. (The highest priority held counts jobs not due yet: a
value whose best job is scheduled is probed early, so a claim may stop before a value whose
due jobs rank higher than those it found; the next claims reach it.) When the values probed
share one priority, each is asked for exactly the turns the tags give it (PostgreSQL locks no
spare job); one with fewer due jobs than that leaves its turns to the others in a second probe
of the same claim. Cost per claim: the groups' scan, one read of the clock with the tags
ahead of it (a tag at or behind the clock counts as the clock, so those need not be read),
one statement probing the values served (two when one falls short), one write each for tags
and clock (on PostgreSQL, part of the claim's own statement: backends/pg_claim.py).
Only values with jobs due count, and a capped group gets no probe, so the turn never waits
on one: the work is conserved. On PostgreSQL a value's tag is written only by the claim
holding its group's lock, and the clock only moves forward (``GREATEST``), so concurrent
claims on other values compose.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .base import FairWeights
from .host import Conn, SQLHost, dumps

TRIM_EVERY = 64  # claims between two trims of a key's tags behind its clock

Candidate = tuple[int, int, Any]  # (id, priority, run_at) as limited_due reads them


@dataclass(slots=True)
class Pick:
    """One start the turns give: the job, its value, and the value's tag before and after."""

    job: Candidate
    value: str
    start: float
    finish: float


@dataclass(slots=True)
class Turn:
    """A value competing for starts: its tag, its weight, its due jobs best first."""

    value: str
    tag: float
    weight: float
    jobs: list[Candidate] = field(default_factory=list)


def take_turns(turns: Iterable[Turn], n: int) -> list[Pick]:
    """Up to ``n`` starts, in the order the turns give them (highest head priority, then
    smallest tag, then value)."""
    heap: list[tuple[int, float, str, int, Turn]] = []
    single = True
    for t in turns:
        if t.jobs:
            heap.append((-t.jobs[0][1], t.tag, t.value, 0, t))
            single = single and len(t.jobs) == 1
    if single:  # one job each (a claim over many values): the order is a sort, no heap
        heap.sort()
        return [Pick(t.jobs[0], v, tag, tag + 1.0 / t.weight) for _, tag, v, _, t in heap[:n]]
    heapq.heapify(heap)
    picks: list[Pick] = []
    while heap and len(picks) < n:
        _, tag, value, i, t = heapq.heappop(heap)
        finish = tag + 1.0 / t.weight
        picks.append(Pick(t.jobs[i], value, tag, finish))
        if i + 1 < len(t.jobs):
            heapq.heappush(heap, (-t.jobs[i + 1][1], finish, value, i + 1, t))
    return picks


def turns_each(
    tags: Mapping[str, float], rooms: Mapping[str, tuple[int, int]], weights: FairWeights, n: int
) -> dict[str, int]:
    """How many of ``n`` starts the turns give each value of ``tags`` (its tag), were each to
    have due jobs enough at one priority: at most its room (``rooms[value][0]``)."""
    counts = dict.fromkeys(tags, 0)
    heap = [(tag, v) for v, tag in tags.items() if rooms[v][0] > 0]
    heapq.heapify(heap)
    for _ in range(n):
        if not heap:
            break
        tag, v = heapq.heappop(heap)
        counts[v] += 1
        if counts[v] < rooms[v][0]:
            heapq.heappush(heap, (tag + 1.0 / weights.of(v), v))
    return counts


@dataclass(slots=True)
class FairPlan:
    """A fair key's picks in one claim, and its clock when they were taken."""

    key: str
    picks: list[Pick]


class SQLFair(SQLHost):
    """The fair half of the limited claim (bound on SQLBackend through SQLFlow)."""

    _fair_claims = 0

    def fair_keys(self) -> list[str]:
        """The fair keys whose turns are stored (served at least once) or that a worker
        declares (its tasks' options in ``task_types``)."""
        return [r["key"] for r in self._fetch("fair_keys")]

    def fair_usage(self, keys: Sequence[str], now: float, since: float) -> list[dict[str, Any]]:
        """Per key and value of ``keys``: due, queued, running, and served since ``since``."""
        if not keys:
            return []
        params = {"keys": dumps(sorted(set(keys))), "now": now, "since": since}
        with self._read_rows() as conn:
            counts = self._dicts(conn.execute(self.q["fair_counts"], params))
            served = self._dicts(conn.execute(self.q["fair_served"], params))
        out: dict[tuple[str, str], dict[str, Any]] = {}
        zero = {"due": 0, "queued": 0, "running": 0, "served": 0}
        for r in counts:
            row = out.setdefault(
                (r["key"], r["value"]), {"key": r["key"], "value": r["value"], **zero}
            )
            row.update(due=int(r["due"]), queued=int(r["queued"]), running=int(r["running"]))
        for r in served:
            row = out.setdefault(
                (r["key"], r["value"]), {"key": r["key"], "value": r["value"], **zero}
            )
            row["served"] = int(r["served"])
        return [out[k] for k in sorted(out)]

    def _fair_picks(
        self,
        conn: Conn,
        key: str,
        rooms: Mapping[str, tuple[int, int]],
        weights: FairWeights,
        base: dict[str, Any],
        limit: int,
        heads: Mapping[str, Candidate] | None = None,
    ) -> FairPlan:
        """The starts the turns give among ``rooms`` (value -> how many more may start, and
        the highest priority it holds) of fair ``key``, up to ``limit``; their jobs are
        locked (PostgreSQL: FOR UPDATE SKIP LOCKED) but not claimed. With ``heads`` (an
        ordered key: each value's head, backends/order.py) a value's only job is its head."""
        q = self.q
        vtime, stored = 0.0, {}
        for value, tag in conn.execute(q["fair_turns_of"], {"key": key}):
            if value is None:
                vtime = float(tag)
            else:
                stored[value] = float(tag)
        tag_of = {v: max(stored.get(v, vtime), vtime) for v in rooms}
        order = [v for _, _, v in sorted((-rooms[v][1], tag_of[v], v) for v in rooms)]
        turns: list[Turn] = []
        at = 0
        while at < len(order) and len(turns) < limit:
            # Any value past the first ``limit`` with jobs due could start only after each of
            # them: probe in batches of what is still wanted, one statement each.
            batch = order[at : at + limit - len(turns)]
            at += len(batch)
            tags = {v: tag_of[v] for v in batch}
            exact = heads is None and len({rooms[v][1] for v in batch}) == 1
            short = 0
            if heads is not None:  # an ordered key: a value's only job is its head
                wants = {v: 1 for v in batch}
                due = {v: [heads[v]] for v in batch if v in heads}
            else:
                if exact:  # one priority: the turns the tags give, exactly (no spare locked)
                    wants = turns_each(tags, rooms, weights, limit)
                else:  # each value's share of the starts wanted, and one more for its turns
                    share = sum(weights.of(v) for v in batch)
                    wants = {
                        v: min(rooms[v][0], 1 + math.ceil(limit * weights.of(v) / share))
                        for v in batch
                    }
                due = self._fair_due(conn, key, base, wants)
                short = sum(wants.values()) - sum(len(jobs) for jobs in due.values())
                if short > 0:  # a value had fewer due than its turns: the others may use them
                    more = {
                        v: min(rooms[v][0], n + short)
                        for v, n in wants.items()
                        if len(due.get(v, ())) == n and n < rooms[v][0]
                    }
                    due.update(self._fair_due(conn, key, base, more))
            for value in batch:
                if due.get(value):
                    turns.append(Turn(value, tags[value], weights.of(value), due[value]))
            if exact and short <= 0 and 0 in wants.values():
                break  # the starts went to values before the rest: later ones come after
        return FairPlan(key, take_turns(turns, limit))

    def _fair_due(
        self, conn: Conn, key: str, base: dict[str, Any], wants: Mapping[str, int]
    ) -> dict[str, list[Candidate]]:
        """Up to ``wants[value]`` best due jobs of each value of fair ``key``, best first,
        locked (PostgreSQL: FOR UPDATE SKIP LOCKED); one statement."""
        asked = {v: n for v, n in wants.items() if n > 0}
        if not asked:
            return {}
        rows = dumps([[v, n] for v, n in asked.items()])
        params = {**base, "key": key, "rows": rows, "n": max(asked.values())}
        due: dict[str, list[Candidate]] = {}
        for r in conn.execute(self.q["fair_due"], params):
            jobs = due.setdefault(r[3], [])
            if len(jobs) < asked[r[3]]:
                jobs.append((r[0], r[1], r[2]))
        return due

    def _fair_headroom(
        self, conn: Conn, groups: list[tuple[str, str]], fair: Collection[str]
    ) -> dict[tuple[str, str], tuple[int, bool]]:
        """The groups of ``fair`` keys (fair or ordered) no limit caps (no stored limit of
        that key): no cap, no rate, so the limited claim need not count their running jobs."""
        keys = {k for k, _ in groups if k in fair}
        if not keys:
            return {}
        capped = {r[0] for r in conn.execute(self.q["stored_limit_keys"], {})}
        free = keys - capped
        return {g: (1 << 30, False) for g in groups if g[0] in free}

    def _fair_served(
        self, conn: Conn, plans: Sequence[FairPlan], claimed: set[int], written: bool = False
    ) -> None:
        """After the claim: the tags of the values whose picks were claimed, and each key's
        clock (``written``: the claim's own statement wrote them, PostgreSQL's
        ``claim_ids_recorded``); now and then, the tags left behind a clock are trimmed."""
        q = self.q
        for plan in plans:
            if written:  # only a trim needs the clock (a claim of no pick counts here too)
                if not plan.picks:
                    continue
                SQLFair._fair_claims += 1
                if SQLFair._fair_claims % TRIM_EVERY == 0:
                    _, vtime = served(plan, claimed)
                    if vtime is not None:
                        conn.execute(q["trim_fair_tags"], {"key": plan.key, "vtime": vtime})
                continue
            tags, vtime = served(plan, claimed)
            if vtime is None:
                continue
            key = plan.key
            rows = dumps([[v, t] for v, t in sorted(tags.items())])
            conn.execute(q["save_fair_tags"], {"key": key, "rows": rows})
            conn.execute(q["advance_fair_clock"], {"key": key, "vtime": vtime})
            SQLFair._fair_claims += 1
            if SQLFair._fair_claims % TRIM_EVERY == 0:
                conn.execute(q["trim_fair_tags"], {"key": key, "vtime": vtime})


def served(plan: FairPlan, claimed: set[int]) -> tuple[dict[str, float], float | None]:
    """Of ``plan``'s picks whose jobs were ``claimed``: each value's new tag (its largest
    finish) and the key's clock (the largest start; None: none claimed)."""
    tags: dict[str, float] = {}
    vtime: float | None = None
    for p in plan.picks:
        if p.job[0] in claimed:
            tags[p.value] = max(tags.get(p.value, p.finish), p.finish)
            vtime = p.start if vtime is None else max(vtime, p.start)
    return tags, vtime
