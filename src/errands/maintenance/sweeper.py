"""The dependency sweeper: repairs a waiting job whose upstream jobs are all final
(docs/pipelines.md), as a maintenance service."""

from __future__ import annotations

import logging

from ..backends.base import SweepReport
from ..backends.verbs import DepVerbs

log = logging.getLogger("errands.maintenance")


class DepSweeper:
    """Repairs what a release of waiting jobs could leave behind: a waiting job whose
    upstreams are all final. Every outcome releases its dependents in its own transaction
    (backends/deps.py), so this finds nothing unless rows were changed by hand; it is the
    promise's safety net, cheap when idle (a walk of the waiting jobs' partial index)."""

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
