"""The Queue's flow-control verbs (docs/flow-control.md), a mixin ``errands.Queue`` inherits:
pause and resume queues, store and clear limits, and read both back. The promises live in the claim
(backends/flow.py); ``errands.limits`` shapes input and output."""

from __future__ import annotations

from .. import fair, limits
from ..backends.base import Audit
from ..core import validate
from ..fair import FairInfo
from ..limits import Limit, LimitInfo, QueueInfo
from .activity import ActivityLog


class FlowControl(ActivityLog):
    """Pauses and limits, stored in the database so they bind every worker; each change
    leaves one row in the activity log."""

    def pause(self, queue: str, *, reason: str | None = None, actor: str = "api") -> None:
        """Stop claims from ``queue`` ('*': every queue) on every worker, until ``resume``:
        stored, so it binds workers started later too. Enqueue, running jobs and the rest
        go on. A queue name gets the rule every queue name gets (no comma)."""
        _queue_name(queue)
        actor = validate.text(actor, "actor", max_bytes=200)
        if reason is not None:
            validate.text(reason, "reason", max_bytes=500)
        audit = self._audit("pause", actor=actor, target=queue, count=1, detail={"reason": reason})
        self.backend.pause_queue(queue, reason, actor, self.clock(), audit=audit)

    def resume(self, queue: str, *, actor: str = "api") -> bool:
        """Lift the pause of ``queue`` ('*': every pause) and wake workers; False if it was
        not paused. A queue stays paused while a '*' pause holds."""
        _queue_name(queue)
        actor = validate.text(actor, "actor", max_bytes=200)
        audit = Audit(
            lambda resumed: self._activity_entry(
                "resume", actor=actor, target=queue, count=len(resumed), detail={"resumed": resumed}
            )
        )
        return bool(self.backend.resume_queue(queue, audit=audit))

    def queues(self) -> list[QueueInfo]:
        """Queues with active jobs or a pause: paused, by whom, since when, why; counts."""
        return limits.queues(self.backend)

    def set_limit(
        self,
        key: str,
        *,
        running: int | None = None,
        rate: tuple[int, float] | None = None,
        actor: str = "api",
    ) -> None:
        """Store a limit for ``key`` that wins over the code's until ``clear_limit``; raising
        it lets waiting jobs go at once, lowering it never stops running ones."""
        spec = Limit(key, running=running, rate=rate).spec()
        actor = validate.text(actor, "actor", max_bytes=200)
        audit = self._audit(
            "set_limit",
            actor=actor,
            target=key,
            count=1,
            detail={"running": running, "rate": None if rate is None else list(rate)},
        )
        self.backend.set_limit(spec, actor, self.clock(), audit=audit)

    def clear_limit(self, key: str, *, actor: str = "api") -> bool:
        """Drop the stored limit of ``key``: the code's applies again. False if none."""
        validate.text(key, "limit key")
        actor = validate.text(actor, "actor", max_bytes=200)
        audit = Audit(
            lambda cleared: self._activity_entry(
                "clear_limit", actor=actor, target=key, count=int(cleared)
            )
        )
        return self.backend.clear_limit(key, audit=audit)

    def limits(self) -> list[LimitInfo]:
        """Every limit: its caps in force and where from, and per group running/waiting."""
        return limits.limits(self.backend)

    def fairness(self, minutes: float = 5) -> list[FairInfo]:
        """Fair share (docs/flow-control.md): per value of each fair key, its jobs due now,
        queued, running, and attempts started in the last ``minutes``."""
        keys = [k for t in self.tasks.values() if (k := t.options.fair_key()) is not None]
        return fair.fairness(self.backend, keys, self.clock(), minutes)


def _queue_name(queue: str) -> None:
    """A queue name, or '*' (every queue) for pause and resume."""
    if queue != "*":
        validate.name(queue, "queue")
