"""The Queue's durable-step verbs (docs/durable-steps.md), a mixin ``errands.Queue``
inherits: send a signal to a job, read a job's recorded steps. The steps themselves are the
handler's (``ctx.step``, ``ctx.sleep``, ``ctx.wait_for``: worker/durable.py)."""

from __future__ import annotations

import asyncio
from typing import Any

from ..core import payload as payload_json
from ..core import validate
from ..core.records import Step
from ..core.steps import check_name
from .activity import ActivityLog


class DurableSteps(ActivityLog):
    """Signals in, steps out."""

    def signal(
        self,
        job_id: int | None = None,
        name: str | None = None,
        payload: Any = None,
        *,
        unique_key: str | None = None,
        actor: str = "api",
        by_hand: bool = False,
    ) -> int:
        """Send signal ``name`` (with a JSON ``payload``) to a job that is not finished, by
        id or by ``unique_key``: kept in order, the k-th ``ctx.wait_for(name)`` takes the
        k-th; a job parked waiting for it is due at once. Returns the job's id. A finished
        or unknown job is refused (``InvalidTransitionError`` / ``JobNotFoundError``).
        ``by_hand=True``: an operator's signal (the CLI's, the dashboard's), logged in the
        activity log under ``actor`` in the same transaction (an application's own is not)."""
        if (job_id is None) == (unique_key is None):
            raise ValueError("q.signal takes a job id or unique_key=…, exactly one of them")
        target: int | str
        if job_id is not None:
            target = validate.job_id(job_id)
        else:
            target = validate.text(unique_key, "unique_key")
        check_name(name, "q.signal")
        assert name is not None
        text = payload_json.encode(
            payload, what="signal payload", max_bytes=self.settings.max_payload_bytes
        )
        audit = self._by_hand("signal", by_hand, actor, name=name)
        return self.backend.send_signal(target, name, text, actor, self.clock(), audit=audit)

    async def signal_async(self, *args: Any, **kwargs: Any) -> int:
        """``q.signal`` (the same arguments) from async code: the write runs off the loop."""
        return await asyncio.to_thread(self.signal, *args, **kwargs)

    def steps(self, job_id: int) -> list[Step]:
        """A job's recorded durable calls in call order: kind (step, sleep, wait), name,
        attempt, started_at, finished_at, result (wake_at: a sleep's end, a wait's
        timeout)."""
        return self.backend.steps(validate.job_id(job_id))
