"""The expiry service: cancels queued jobs not started within their ``expires_in`` of being
due (``EXPIRED:QUEUE``) and fails queued jobs past their deadline (``DEADLINE:EXCEEDED``,
docs/flow-control.md "Time rules"), so counts, ``wait`` and waiting dependents see them
final. The claim never starts such a job whether or not this has run."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from ..backends.verbs import LeaderVerbs

log = logging.getLogger("errands.maintenance")

BATCH = 1000  # jobs per transaction; a pass goes on while batches are full, up to MAX_BATCHES
MAX_BATCHES = 10


@dataclass
class ExpiryReport:
    """One pass: the ids of the jobs it cancelled (expired) and failed (past deadline)."""

    expired: list[int] = field(default_factory=list)
    past_deadline: list[int] = field(default_factory=list)


class Expirer:
    """Cancels expired queued jobs and fails those past their deadline, ``BATCH`` at a time;
    cheap when none is (one probe each of the jobs_expiring and jobs_deadline indexes)."""

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
        for _ in range(MAX_BATCHES):
            ids = self.backend.fail_past_deadline(now, BATCH)
            report.past_deadline.extend(ids)
            if len(ids) < BATCH:
                break
        if report.past_deadline:
            log.info(
                "expiry: %d job(s) past their deadline failed (DEADLINE:EXCEEDED)",
                len(report.past_deadline),
                extra={
                    "errands": {
                        "event": "jobs_past_deadline",
                        "job_ids": report.past_deadline[:100],
                    }
                },
            )
        if report.expired:
            log.info(
                "expiry: %d job(s) not started within their expires_in cancelled (EXPIRED:QUEUE)",
                len(report.expired),
                extra={"errands": {"event": "jobs_expired", "job_ids": report.expired[:100]}},
            )
        return report
