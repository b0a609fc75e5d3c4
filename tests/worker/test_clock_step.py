"""Clocks (issue #8 §5): a worker schedules its own deadlines on a monotonic clock and uses
the Queue's wall clock only for what it stores, so a wall-clock step mid-job neither stops
its heartbeats nor stalls its maintenance."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import datetime

import pytest

import errands
from errands.worker.loop import Worker
from helpers.support import SteppingClock, claim, event_names, get_job, wait_for

MakeQueue = Callable[..., errands.Queue]
STEP = -3600.0


def _stepped(moment: datetime | None) -> bool:
    """Written with the stepped clock (an hour behind the real one)?"""
    return moment is not None and moment.timestamp() < time.time() + STEP / 2


def test_a_wall_clock_step_back_mid_job_keeps_heartbeats_and_maintenance_going(
    make_queue: MakeQueue,
) -> None:
    clock = SteppingClock()
    q = make_queue(clock=clock, lease_seconds=1, heartbeat_seconds=0.25)
    producer = make_queue(clock=clock)  # no tasks: may enqueue jobs another service runs

    ghost: list[int] = []

    @q.task(max_attempts=1)
    def long_job(ctx: errands.JobContext) -> str:
        clock.offset = STEP  # the host's clock jumps back an hour, mid-job
        # Another worker (dead) holds a job whose lease runs out a moment later, by the new
        # clock: this worker's rescuer must still sweep to recover it.
        ghost.append(producer.enqueue("ghosted", {}, queue="elsewhere"))
        (held,) = claim(
            q, ["ghosted"], now=clock(), worker_id="ghost", queues=["elsewhere"], lease_seconds=0.5
        )
        assert held.id == ghost[0]
        wait_for(
            lambda: _stepped(get_job(q, ctx.job_id).heartbeat_at),
            timeout=30,
            what="a heartbeat written after the step",
        )
        wait_for(
            lambda: "RECOVERED" in event_names(q, ghost[0]),
            timeout=30,
            what="the rescuer to sweep after the step",
        )
        # Longer than the lease: without heartbeats the job would be rescued meanwhile.
        time.sleep(2)
        return "done"

    job_id = long_job.enqueue()
    worker = Worker(q, concurrency=1, burst=True, handle_signals=False)
    done: list[errands.WorkerSummary] = []
    thread = threading.Thread(target=lambda: done.append(worker.run()), daemon=True)
    thread.start()
    thread.join(120)
    if thread.is_alive():
        worker.stop()
        thread.join(30)
        pytest.fail("the worker did not return")

    job = q.get(job_id)
    assert job is not None
    assert (job.status, job.result, job.attempts, job.error_code) == ("succeeded", "done", 1, None)
    assert [a.status for a in q.attempts(job_id)] == ["succeeded"]  # ran once, never rescued
    assert "RECOVERED" not in event_names(q, job_id)
    assert _stepped(job.finished_at)  # stored times follow the wall clock, step included
    assert done[0].refused == 0
