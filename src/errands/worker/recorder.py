"""Recording a batch of outcomes: one transaction for all of them (and the worker's next
claim), and what to do when the database refuses it — without ever letting one bad outcome
harm its neighbours (docs/runtime.md, "Hostile outcomes").

The control loop (worker.py) decides what goes in a batch and what to claim with it; the
``Recorder`` writes it and counts what it wrote in the worker's summary.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from ..backends.base import ClaimedJob, ClaimRequest, Outcome
from ..backends.verbs import Backend
from ..errors import DatabaseBusyError
from . import execution
from . import log as worker_log
from .db import WorkerDatabase, describe
from .executor import Finished, Slot

log = logging.getLogger("errands.worker")


@dataclass(slots=True)
class WorkerSummary:
    """What one ``run_worker`` call did."""

    worker_id: str
    claimed: int = 0
    succeeded: int = 0
    failed: int = 0
    retried: int = 0
    cancelled: int = 0
    released: int = 0
    refused: int = 0  # outcomes the fence refused: the lease had been recovered
    rescued: int = 0
    db_errors: int = 0  # busy timeouts and other database errors survived
    recycled: bool = False  # stopped to be replaced: a sync handler overran its timeout
    interrupted: bool = False
    queue_closed: bool = False  # stopped because the application closed its Queue
    outcomes: dict[str, int] = field(default_factory=dict)

    @property
    def processed(self) -> int:
        """Jobs that ended an attempt: succeeded, failed, retried or cancelled."""
        return self.succeeded + self.failed + self.retried + self.cancelled


@dataclass(slots=True)
class Recorded:
    """What became of a batch."""

    written: list[tuple[Slot, Outcome]]  # in batch order; a refused one replaced by its stand-in
    applied: list[bool]  # whether the fence applied each written outcome
    jobs: list[ClaimedJob]  # claimed in the same transaction
    claimed: bool  # the claim ran (False: there was none, or it rolled back with the batch)
    kept: int = 0  # the batch's last ``kept`` entries were not written: they wait for the next


def as_recorded(
    outcomes: list[tuple[Slot, Outcome]], recorded: list[Outcome]
) -> list[tuple[Slot, Outcome]]:
    """``outcomes`` with each replaced by the one the database recorded (the same, but for a
    retry that would start past its job's deadline: the job failed with DEADLINE:EXCEEDED)."""
    if len(recorded) != len(outcomes):
        return outcomes  # a backend that does not say: as sent
    return [(slot, r) for (slot, _), r in zip(outcomes, recorded, strict=True)]


class Recorder:
    def __init__(
        self, backend: Backend, db: WorkerDatabase, worker_id: str, summary: WorkerSummary
    ) -> None:
        self.backend = backend
        self.db = db
        self.worker_id = worker_id
        self.summary = summary

    def write(
        self,
        batch: list[Finished],
        outcomes: list[tuple[Slot, Outcome]],
        request: ClaimRequest | None,
        now: float,
    ) -> Recorded:
        """Write ``outcomes`` (the batch's entries that have one) in one transaction, with
        ``request``'s claim if given. Contention keeps the whole batch for the next step. Any
        other refusal: maybe one outcome the database refuses, so they are written one by
        one and only the culprit is affected; if every write fails, the database itself is
        in trouble (disk full…) and the rest of the batch waits, as for contention."""
        db, backend, wid = self.db, self.backend, self.worker_id
        jobs: list[ClaimedJob] = []
        recorded: list[Outcome] = []  # as the database recorded them (a retry past its
        try:  # deadline became the job's failure): what is counted and logged
            # The slots' claimed jobs go with the outcomes: the batch's figures are grouped
            # from them rather than read back from the rows (backends/figures.py).
            given, held = [o for _, o in outcomes], [s.job for s, _ in outcomes]
            if request is None:
                applied = db.call(backend.finish, given, wid, now, held, recorded=recorded)
            else:
                applied, jobs = db.call(
                    backend.finish_and_claim, given, wid, request, now, held, recorded=recorded
                )
        except DatabaseBusyError as exc:
            db.survive(f"recording {len(outcomes)} outcome(s) postponed", exc)
            return Recorded([], [], [], claimed=False, kept=len(batch))
        except Exception as exc:
            return self._one_by_one(batch, exc, now)  # the claim rolled back with the batch
        outcomes = as_recorded(outcomes, recorded)
        self._count(outcomes, applied)
        if log.isEnabledFor(logging.WARNING):  # failures, retries, refusals (worker/log.py)
            worker_log.outcomes(batch, [o for _, o in outcomes], applied, wid, now)
        return Recorded(outcomes, applied, jobs, claimed=request is not None)

    def _one_by_one(self, batch: list[Finished], first: Exception, now: float) -> Recorded:
        """Write a failed batch's outcomes one at a time. An outcome the database refuses is
        replaced by a final failure naming why (a storable one, so it cannot fail forever).
        If the database refuses even that, the rest of the batch is kept."""
        log.warning(
            "recording %d outcome(s) in one batch failed (%s); writing them one by one",
            len(batch),
            describe(first),
        )
        db, backend, wid = self.db, self.backend, self.worker_id
        written: list[tuple[Slot, Outcome]] = []
        applied: list[bool] = []
        for i, (slot, outcome, _) in enumerate(batch):
            if outcome is None:
                continue
            recorded: list[Outcome] = []
            try:
                (ok,) = db.call(backend.finish, [outcome], wid, now, [slot.job], recorded=recorded)
                outcome = recorded[0] if recorded else outcome
            except DatabaseBusyError as exc:
                return self._keep_rest(batch, i, written, applied, exc)
            except Exception as exc:
                fallback = execution.unstorable(outcome, describe(exc))
                try:
                    (ok,) = db.call(backend.finish, [fallback], wid, now, [slot.job])
                except Exception as again:
                    return self._keep_rest(batch, i, written, applied, again)
                log.error(
                    "job %d attempt %d: its outcome could not be stored (%s); recorded as %s",
                    outcome.job_id,
                    outcome.attempt,
                    describe(exc),
                    getattr(fallback, "error_code", "failed"),
                )
                outcome = fallback
            written.append((slot, outcome))
            applied.append(ok)
        self._count(written, applied)
        if log.isEnabledFor(logging.WARNING):
            worker_log.outcomes(batch, [o for _, o in written], applied, wid, now)
        return Recorded(written, applied, [], claimed=False)

    def _keep_rest(
        self,
        batch: list[Finished],
        i: int,
        written: list[tuple[Slot, Outcome]],
        applied: list[bool],
        exc: Exception,
    ) -> Recorded:
        """Count what was written; batch[i:] waits for the next step."""
        self._count(written, applied)
        self.db.survive(f"recording {len(batch) - i} outcome(s) postponed", exc)
        return Recorded(written, applied, [], claimed=False, kept=len(batch) - i)

    def _count(self, outcomes: list[tuple[Slot, Outcome]], applied: list[bool]) -> None:
        s = self.summary
        for (_, outcome), ok in zip(outcomes, applied, strict=True):
            if not ok:
                s.refused += 1  # logged by worker_log.outcomes
                continue
            name = type(outcome).__name__
            s.outcomes[name] = s.outcomes.get(name, 0) + 1
            if name == "Succeeded":
                s.succeeded += 1
            elif name == "Failed":
                s.failed += 1
            elif name == "Retried":
                s.retried += 1
            elif name == "Cancelled":
                s.cancelled += 1
            elif name == "Released":
                s.released += 1
