"""The worker's own loop never dies of a handler's progress value (docs/flow-control.md):
``ctx.progress`` refuses what no backend stores at the call, and the heartbeat's flush of a
pending value survives one that got past it anyway, on both backends."""

from __future__ import annotations

import threading
from collections.abc import Callable

import errands
from errands.worker.loop import Worker
from helpers.support import FixedClock, get_job, wait_for

MakeQueue = Callable[..., errands.Queue]


def test_a_pending_value_no_backend_stores_never_stops_the_heartbeat(
    make_queue: MakeQueue, clock: FixedClock
) -> None:
    q = make_queue(clock=clock, lease_seconds=8, heartbeat_seconds=2)
    pending, release = threading.Event(), threading.Event()

    @q.task
    def work(ctx: errands.JobContext) -> str:
        ctx.progress(0.1, "started")  # written at once
        # Past the call's checks (as through any other way in): kept for the next flush.
        ctx._lease.progress(0.2, "t\udcff")
        pending.set()
        release.wait(30)
        return "done"

    job_id = work.enqueue()
    worker = Worker(q, concurrency=1, handle_signals=False, monotonic=clock)
    worker.start()
    try:
        worker.tick(clock.now)
        assert pending.wait(30)
        clock.advance(2.5)  # the heartbeat flushes the pending value: it cannot be stored
        worker.tick(clock.now)
        release.set()
        wait_for(lambda: worker.executor.done, timeout=30, what="the handler's outcome")
        worker.tick(clock.now)
    finally:
        release.set()
        worker.stop()
        worker.close()
    job = get_job(q, job_id)
    assert (job.status, job.result) == ("succeeded", "done")
    assert (job.progress, job.progress_message) == (0.1, "started")
