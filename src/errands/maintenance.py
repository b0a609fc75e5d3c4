"""Maintenance services — the rescuer, the periodic scheduler, the pruner — each run by one
elected worker among all workers of a database.

Leadership is per service (a ``maintenance_leases`` row named after it), so a worker only
competes for the services it has: one built without periodic schedules never wins the
scheduler's role and starves them.

Each service has a ``run_once(now)`` that does one bounded pass and reports what it did, so
tests drive it with a chosen ``now`` and production runs it on a timer in the worker.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Protocol

from .backends.base import Backend, DepVerbs, LeaderVerbs, RescueReport, SweepReport
from .errors import DatabaseError

log = logging.getLogger("errands.maintenance")

# Sweeps at least this often, whatever the lease: recovery is lease + sweep + 1 s at worst.
MAX_SWEEP = 5.0


class Service(Protocol):
    name: str

    @property
    def interval(self) -> float:
        """Seconds from one pass to the next, read after each pass (a service may vary it)."""
        ...

    def run_once(self, now: float) -> Any: ...


class Rescuer:
    """Recovers jobs whose lease expired (their worker crashed, hung or lost the database)."""

    name = "rescue"

    def __init__(self, backend: LeaderVerbs, lease_seconds: float) -> None:
        self.backend = backend
        self.interval = min(lease_seconds / 2, MAX_SWEEP)
        self.total = 0  # jobs recovered by this rescuer, for the worker's counters

    def run_once(self, now: float) -> RescueReport:
        report = self.backend.rescue(now)
        self.total += len(report.recovered) + len(report.exhausted)
        # One line per rescued job: each is an attempt whose worker died or hung.
        for job_id, fate in [(i, "queued again") for i in report.recovered] + [
            (i, "failed (no attempts left)") for i in report.exhausted
        ]:
            log.warning(
                "job %d rescued: its lease expired (worker died or hung), attempt marked lost "
                "(LOST:LEASE_EXPIRED); %s",
                job_id,
                fate,
                extra={"errands": {"event": "rescued", "job_id": job_id, "outcome": fate}},
            )
        return report


class DepSweeper:
    """Repairs what a release of waiting jobs could leave behind: a waiting job whose
    upstreams are all final (SPEC §4c). Every outcome releases its dependents in its own
    transaction, so this finds nothing unless rows were changed by hand; it is the promise's
    safety net, cheap when idle (a walk of the waiting jobs' partial index)."""

    name = "deps"
    interval = 60.0

    def __init__(self, backend: DepVerbs) -> None:
        self.backend = backend

    def run_once(self, now: float) -> SweepReport:
        report = self.backend.sweep_waiting(now)
        if report.closed or report.settled:
            log.error(
                "dependency sweeper: %d open edge(s) of final upstream jobs closed, %d waiting "
                "job(s) released or cancelled (a release was missed: please report it)",
                report.closed,
                len(report.settled),
                extra={"errands": {"event": "deps_swept", "job_ids": report.settled}},
            )
        return report


class Maintenance:
    """Holds (or waits for) the leader lease of each service and runs the ones it leads."""

    def __init__(
        self, backend: Backend, holder: str, services: Sequence[Service], ttl: float
    ) -> None:
        self.backend = backend
        self.holder = holder
        self.services = list(services)
        self.ttl = ttl
        self.leading: dict[str, bool] = {s.name: False for s in self.services}
        self._next_lead = 0.0
        self._next_run = {s.name: 0.0 for s in self.services}
        self.reports: dict[str, Any] = {}

    @property
    def renew_every(self) -> float:
        return min([self.ttl / 3, *(s.interval for s in self.services)])

    def tick(self, now: float, mono: float | None = None) -> float:
        """Renew or seek leadership when due, run the due services we lead; return when to
        call again. ``now`` (wall clock) goes to the database; the schedule runs on ``mono``
        (a monotonic reading; ``now`` if not given, as tests that drive time do), so a step
        of the wall clock neither stalls nor rushes maintenance. Raises DatabaseReplacedError
        if the database file was deleted or replaced under this worker (checked on the same
        cadence, on every worker)."""
        at = now if mono is None else mono
        if at >= self._next_lead:
            self.backend.check_identity()
            for service in self.services:
                try:
                    self.leading[service.name] = self.backend.try_lead(
                        service.name, self.holder, self.ttl, now
                    )
                except DatabaseError as exc:
                    log.warning("leader election for %s postponed: %s", service.name, exc)
            self._next_lead = at + self.renew_every
        due = [self._next_lead]
        for service in self.services:
            if not self.leading[service.name]:
                continue
            if at >= self._next_run[service.name]:
                try:
                    self.reports[service.name] = service.run_once(now)
                except DatabaseError as exc:
                    log.warning("%s postponed: %s", service.name, exc)
                self._next_run[service.name] = at + service.interval
            due.append(self._next_run[service.name])
        return min(due)

    def stop(self) -> None:
        for name, leading in self.leading.items():
            if leading:
                try:
                    self.backend.resign(name, self.holder)
                except DatabaseError:
                    pass  # the lease simply expires
                self.leading[name] = False
