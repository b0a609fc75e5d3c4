"""Quarantine: a job whose previous attempt was lost runs alone in its worker process.

A handler that kills its process (``os._exit``, a crashing C extension, the OOM killer)
takes every job its worker holds down with it. So a job claimed with ``suspect`` set (its
previous attempt ended ``lost``: the claim reads ``LOST:LEASE_EXPIRED`` from the row) is
held back; every other unstarted job the worker holds, and any claimed beside it, is handed
back unstarted (``RELEASED``, no attempt used); the worker claims nothing more; the suspect
starts once nothing else is held and every outcome is recorded; claims resume once its own
outcome is recorded (or its lease lost). An innocent job thus loses at most one attempt in a
row to another job's crash (docs/runtime.md, "Quarantine").
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from ..backends.base import ClaimedJob
from .executor import Slot

log = logging.getLogger("errands.worker")


class Quarantine:
    """The worker's one quarantined job, if any (the control thread's alone)."""

    __slots__ = ("_started", "cautious", "slot")

    def __init__(self) -> None:
        self.slot: Slot | None = None
        self._started = False
        # After a suspect, claim one job at a time until a claim brings none: a crashed
        # worker's whole prefetch comes back lost, and claiming full batches would hand back
        # all but one suspect of each, again and again (quadratic in the suspects).
        self.cautious = False

    def limit(self, want: int) -> int:
        """How many jobs the next claim may ask for."""
        return min(want, 1) if self.cautious else want

    def claimed(self, jobs: list[ClaimedJob]) -> None:
        if jobs and not any(job.suspect for job in jobs):
            self.cautious = False

    @property
    def active(self) -> bool:
        return self.slot is not None

    def take(self, slot: Slot, held: Mapping[int, Slot]) -> list[Slot] | None:
        """Where a just-claimed (and already held) job goes: None, start it as usual; else
        it is held back and the returned jobs are to be handed back unstarted."""
        if self.slot is not None:
            return [slot]  # nothing runs beside a quarantined job
        if not slot.job.suspect:
            return None
        self.slot, self._started = slot, False
        self.cautious = True
        log.warning(
            "job %d attempt %d: its previous attempt was lost (its worker died or froze "
            "holding it); running it alone, with no other job held by this worker",
            slot.job.id,
            slot.job.attempt,
        )
        return [s for s in held.values() if s is not slot]

    def step(self, held: Mapping[int, Slot], pending: bool) -> tuple[bool, Slot | None]:
        """(ended, the job to start now): it ends once no longer held (recorded, or its
        lease lost); it starts once alone and no outcome is ``pending``."""
        slot = self.slot
        if slot is None:
            return False, None
        if held.get(slot.job.id) is not slot:
            self.slot = None
            return True, None
        if not self._started and len(held) == 1 and not pending:
            self._started = True
            return False, slot
        return False, None
