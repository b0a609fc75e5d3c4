"""Maintenance services (rescue now; prune and the periodic scheduler plug in the same way),
run by one elected leader among all workers.

Each service has a ``run_once(now)`` that does one bounded pass and reports what it did, so
tests drive it with a chosen ``now`` and production runs it on a timer in the worker.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Protocol

from .backends.base import Backend, RescueReport
from .errors import DatabaseError

log = logging.getLogger("errands.maintenance")

LEADER_ROLE = "maintenance"
# Sweeps at least this often, whatever the lease: recovery is lease + sweep + 1 s at worst.
MAX_SWEEP = 5.0


class Service(Protocol):
    name: str
    interval: float

    def run_once(self, now: float) -> Any: ...


class Rescuer:
    """Recovers jobs whose lease expired (their worker crashed, hung or lost the database)."""

    name = "rescue"

    def __init__(self, backend: Backend, lease_seconds: float) -> None:
        self.backend = backend
        self.interval = min(lease_seconds / 2, MAX_SWEEP)

    def run_once(self, now: float) -> RescueReport:
        report = self.backend.rescue(now)
        if report.recovered or report.exhausted:
            log.info(
                "recovered %d job(s) whose lease expired (%d had no attempts left)",
                len(report.recovered) + len(report.exhausted),
                len(report.exhausted),
            )
        return report


class Maintenance:
    """Holds (or waits for) the leader lease and runs due services while leading."""

    def __init__(
        self, backend: Backend, holder: str, services: Sequence[Service], ttl: float
    ) -> None:
        self.backend = backend
        self.holder = holder
        self.services = list(services)
        self.ttl = ttl
        self.leading = False
        self._next_lead = 0.0
        self._next_run = {s.name: 0.0 for s in self.services}
        self.reports: dict[str, Any] = {}

    @property
    def renew_every(self) -> float:
        return min([self.ttl / 3, *(s.interval for s in self.services)])

    def tick(self, now: float) -> float:
        """Renew or seek leadership when due, run due services; return when to call again."""
        if now >= self._next_lead:
            try:
                self.leading = self.backend.try_lead(LEADER_ROLE, self.holder, self.ttl, now)
            except DatabaseError as exc:
                log.warning("leader election postponed: %s", exc)
            self._next_lead = now + self.renew_every
        if not self.leading:
            return self._next_lead
        for service in self.services:
            if now < self._next_run[service.name]:
                continue
            try:
                self.reports[service.name] = service.run_once(now)
            except DatabaseError as exc:
                log.warning("%s postponed: %s", service.name, exc)
            self._next_run[service.name] = now + service.interval
        return min(self._next_lead, *self._next_run.values())

    def stop(self) -> None:
        if self.leading:
            try:
                self.backend.resign(LEADER_ROLE, self.holder)
            except DatabaseError:
                pass  # the lease simply expires
            self.leading = False
