"""The workers noun: the registry of worker processes (``workers`` table).

Queries: ``jobs.sql`` (``upsert_worker``, ``worker_seen``, ``worker_stopped``,
``worker_counters``) and ``ops.sql`` (``workers_seen_since``, ``live_worker_counters``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .base import WorkerInfo
from .host import SQLHost, iso


class SQLWorkers(SQLHost):
    """Workers register, are seen, stop; their counters and the live ones are read back."""

    def register_worker(self, info: WorkerInfo, now: float) -> None:
        params = {
            "id": info.id,
            "hostname": info.hostname,
            "pid": info.pid,
            "queues": None if info.queues is None else ",".join(info.queues),
            "types": None if info.types is None else ",".join(info.types),
            "schedules": None if info.schedules is None else ",".join(info.schedules),
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
        for r in self._fetch("worker_counters"):
            for key, value in json.loads(r["counters"]).items():
                totals[key] = totals.get(key, 0) + int(value)
        return totals

    def live_counters(self, now: float, alive_seconds: float) -> list[dict[str, int]]:
        """The counters of each live worker (not summed: some are states, such as how many
        WAL truncations in a row were blocked)."""
        rows = self._fetch("live_worker_counters", {"alive_since": now - alive_seconds})
        return [{k: int(v) for k, v in json.loads(r["counters"]).items()} for r in rows]

    def live_workers(self, now: float, alive_seconds: float) -> list[dict[str, Any]]:
        ep = self._epoch
        rows = self._fetch("workers_seen_since", {"alive_since": now - alive_seconds})
        return [
            {
                "id": r["id"],
                "hostname": r["hostname"],
                "pid": r["pid"],
                "queues": _names(r["queues"]),
                "types": _names(r["types"]),
                "schedules": _names(r["schedules"]),
                "concurrency": r["concurrency"],
                "started_at": iso(ep(r["started_at"])),
                "last_seen_at": iso(ep(r["last_seen_at"])),
            }
            for r in rows
        ]


def _names(text: str | None) -> list[str] | None:
    return None if text is None else [x for x in text.split(",") if x]


def _counters(counters: Mapping[str, int] | None) -> str | None:
    return None if counters is None else json.dumps(dict(counters), sort_keys=True)
