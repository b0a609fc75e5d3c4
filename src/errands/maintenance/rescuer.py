"""The rescuer: recovers jobs whose lease expired (their worker crashed, hung or lost the
database), as a maintenance service."""

from __future__ import annotations

import logging
from typing import Protocol

from ..backends.base import RescueReport
from ..backends.verbs import LeaderVerbs

log = logging.getLogger("errands.maintenance")

# Sweeps at least this often, whatever the lease: recovery is lease + sweep + 1 s at worst.
MAX_SWEEP = 5.0


class RescueVerbs(LeaderVerbs, Protocol):
    """What the rescuer uses: lost leases, and waits for a signal whose timeout passed."""

    def wake_waits(self, now: float, *, limit: int = 1000) -> list[int]: ...


class Rescuer:
    """Recovers jobs whose lease expired (their worker crashed, hung or lost the database)."""

    name = "rescue"

    def __init__(self, backend: RescueVerbs, lease_seconds: float) -> None:
        self.backend = backend
        self.interval = min(lease_seconds / 2, MAX_SWEEP)
        self.total = 0  # jobs recovered by this rescuer, for the worker's counters

    def run_once(self, now: float) -> RescueReport:
        report = self.backend.rescue(now)
        # ctx.wait_for(timeout=…) past its timeout: due now, to raise SignalTimeout there
        # (docs/durable-steps.md). Checked at each pass, so a timeout is seen within one.
        for job_id in self.backend.wake_waits(now):
            log.info("job %d: its wait for a signal timed out; queued", job_id)
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
