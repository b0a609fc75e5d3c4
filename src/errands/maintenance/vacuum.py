"""The vacuum service (PostgreSQL): VACUUMs errands' own tables when their dead tuples pile
up and the server's autovacuum has not reclaimed them — it is off (server-wide or for the
table), or lagging — so a queue's speed does not depend on the server's defaults
(docs/postgres.md, "Dead tuples, vacuum and the xmin horizon").

Every claim and outcome replaces rows (``jobs``, ``job_attempts``, the figures); the old
versions stay as dead tuples, and a claim walks their index entries until VACUUM removes them.
A plain VACUUM takes no exclusive lock: workers go on claiming while it runs. It runs on a
thread of its own, so the worker's control loop never waits for it. On SQLite (no dead
tuples) a pass finds nothing to do.
"""

from __future__ import annotations

import logging
import threading
import time

from ..backends.base import TableHealth
from ..backends.verbs import VacuumVerbs
from ..errors import DatabaseError

log = logging.getLogger("errands.maintenance")

VACUUM_INTERVAL = 10.0  # seconds between looks at the statistics (one catalog read)
# A table is vacuumed once its dead tuples pass VACUUM_MIN_DEAD plus VACUUM_SCALE of its live
# ones: autovacuum's own rule (threshold + scale factor * live), with a scale well under its
# default 0.2, because the cost of dead tuples to a claim grows with their number, not with
# the size of the job history beside them.
VACUUM_MIN_DEAD = 1000
VACUUM_SCALE = 0.05
# Where autovacuum is on and ran on the table within this many seconds, it keeps up: leave
# the table to it (a second VACUUM on top would only cancel or wait for its work).
VACUUM_AUTOVACUUM_GRACE = 60.0


class Vacuumer:
    """Maintenance service: each pass reads errands' tables' statistics and VACUUMs those
    whose dead tuples passed the threshold, unless autovacuum reclaimed them recently. What
    a VACUUM could not reclaim (something held the xmin horizon) is remembered, so the next
    pass waits for new dead tuples instead of vacuuming the same table again for nothing."""

    name = "vacuum"
    interval = VACUUM_INTERVAL

    def __init__(
        self,
        backend: VacuumVerbs,
        *,
        min_dead: int = VACUUM_MIN_DEAD,
        scale: float = VACUUM_SCALE,
        grace: float = VACUUM_AUTOVACUUM_GRACE,
    ) -> None:
        self.backend = backend
        self.min_dead = min_dead
        self.scale = scale
        self.grace = grace
        self.left: dict[str, int] = {}  # dead tuples this service's last VACUUM left, by table
        self.vacuums = 0  # tables vacuumed by this service
        self._thread: threading.Thread | None = None

    def due(self, t: TableHealth, now: float) -> bool:
        """Whether ``t`` needs errands' VACUUM now."""
        pending = t.dead_tuples - min(self.left.get(t.name, 0), t.dead_tuples)
        if pending < self.min_dead + self.scale * t.live_tuples:
            return False
        recent = t.last_autovacuum_at is not None and now - t.last_autovacuum_at < self.grace
        return not (t.autovacuum_on and recent)

    def run_once(self, now: float) -> list[str] | None:
        """Start vacuuming the tables that are due, on a thread of its own; their names, or
        None when there is nothing to do (or the last pass's VACUUM still runs)."""
        if self._thread is not None and self._thread.is_alive():
            return None
        tables = [t for t in self.backend.table_health() if self.due(t, now)]
        if not tables:
            return None
        self._thread = threading.Thread(
            target=self._vacuum, args=(tables,), name="errands-vacuum", daemon=True
        )
        self._thread.start()
        return [t.name for t in tables]

    def wait(self, timeout: float | None = None) -> None:
        """Wait for the VACUUM a pass started (tests, and a worker stopping)."""
        if self._thread is not None:
            self._thread.join(timeout)

    def _vacuum(self, tables: list[TableHealth]) -> None:
        for t in tables:
            started = time.monotonic()
            try:
                self.backend.vacuum_table(t.name)
                after = {a.name: a for a in self.backend.table_health()}.get(t.name)
            except DatabaseError as exc:  # a lock timeout, a dropped connection: next pass
                log.warning("VACUUM of %s postponed: %s", t.name, exc)
                continue
            left = t.dead_tuples if after is None else after.dead_tuples
            self.left[t.name] = left
            self.vacuums += 1
            log.info(
                "vacuumed %s: %s dead tuples before, %s left (%.2f s)%s",
                t.name,
                f"{t.dead_tuples:,}",
                f"{left:,}",
                time.monotonic() - started,
                " — something holds the xmin horizon (errands check names it)"
                if left >= self.min_dead
                else "",
                extra={
                    "errands": {
                        "event": "vacuumed",
                        "table": t.name,
                        "dead_before": t.dead_tuples,
                        "dead_after": left,
                    }
                },
            )
