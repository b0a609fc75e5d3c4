"""The runner of the maintenance services (``rescuer``, ``scheduler``, ``pruner``, one module
each beside this one): each service is run by one elected worker among all workers of a
database.

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

from ..backends.verbs import Backend
from ..errors import DatabaseError

log = logging.getLogger("errands.maintenance")


class Service(Protocol):
    name: str

    @property
    def interval(self) -> float:
        """Seconds from one pass to the next, read after each pass (a service may vary it)."""
        ...

    def run_once(self, now: float) -> Any: ...


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
