"""The expiry service: cancels queued jobs not started within their ``expires_in`` of being
due (``EXPIRED:QUEUE``, docs/flow-control.md "Time rules"), so counts, ``wait`` and waiting
dependents see them final. The claim never starts such a job whether or not this has run."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from ..backends.verbs import LeaderVerbs

log = logging.getLogger("errands.maintenance")

BATCH = 1000  # jobs per transaction; a pass goes on while batches are full, up to MAX_BATCHES
MAX_BATCHES = 10


@dataclass
class ExpiryReport:
    """One pass: the ids of the jobs it cancelled."""

    expired: list[int] = field(default_factory=list)


class Expirer:
    """Cancels expired queued jobs, ``BATCH`` at a time; cheap when none is (one probe of
    the jobs_expiring index)."""

    name = "expiry"
    interval = 5.0

    def __init__(self, backend: LeaderVerbs) -> None:
        self.backend = backend

    def run_once(self, now: float) -> ExpiryReport:
        report = ExpiryReport()
        for _ in range(MAX_BATCHES):
            ids = self.backend.expire(now, BATCH)
            report.expired.extend(ids)
            if len(ids) < BATCH:
                break
        if report.expired:
            log.info(
                "expiry: %d job(s) not started within their expires_in cancelled (EXPIRED:QUEUE)",
                len(report.expired),
                extra={"errands": {"event": "jobs_expired", "job_ids": report.expired[:100]}},
            )
        return report
