"""The task types noun: each task type's declared options (``task_types``, migration 7), and
the facts about the database as a whole (``errands_meta``: where a graduated file went).

Queries: ``task_types.sql``, ``meta.sql``. A worker declares its tasks when it starts; a
producer that enqueues a type it has no task for reads them (cached: ``errands.client.declared``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from .base import Graduation, TaskTypeRow
from .host import SQLHost, from_json

GRADUATED_TO = "graduated_to"  # errands_meta key: the (redacted) URL a graduate moved to


class SQLTaskTypes(SQLHost):
    """Declared task options, and the database's own facts."""

    def declare_task_types(self, rows: Sequence[TaskTypeRow], now: float) -> None:
        if not rows:
            return
        with self._write("declare_task_types") as conn:
            for r in rows:
                params = {
                    "type": r.type,
                    "queue": r.queue,
                    "priority": r.priority,
                    "max_attempts": r.max_attempts,
                    "timeout_seconds": r.timeout_seconds,
                    "options": json.dumps(r.options, sort_keys=True),
                    "declared_by": r.declared_by,
                    "now": now,
                }
                conn.execute(self.q["declare_task_type"], params)

    def task_types(self) -> list[TaskTypeRow]:
        ep = self._epoch
        return [
            TaskTypeRow(
                type=r["type"],
                queue=r["queue"],
                priority=int(r["priority"]),
                max_attempts=int(r["max_attempts"]),
                timeout_seconds=(
                    None if r["timeout_seconds"] is None else float(r["timeout_seconds"])
                ),
                options=_object(from_json(r["options"])),
                declared_by=r["declared_by"],
                declared_at=ep(r["declared_at"]),
            )
            for r in self._fetch("list_task_types")
        ]

    # -- errands_meta -----------------------------------------------------------------------

    def mark_graduated(self, target: str, now: float) -> None:
        params = {"key": GRADUATED_TO, "value": target, "now": now}
        with self._write("mark_graduated") as conn:
            conn.execute(self.q["set_meta"], params)

    def graduation(self) -> Graduation | None:
        rows = self._fetch("get_meta", {"key": GRADUATED_TO})
        if not rows:
            return None
        return Graduation(target=rows[0]["value"], at=self._epoch(rows[0]["updated_at"]) or 0.0)

    def reopen(self) -> bool:
        with self._write("reopen") as conn:
            return conn.execute(self.q["delete_meta"], {"key": GRADUATED_TO}).fetchone() is not None


def _object(value: object) -> dict[str, object]:
    return dict(value) if isinstance(value, dict) else {}
