"""DBOS Transact's side of bench/peers/steps.py, run in its own virtual environment:

    STEPS_DB=… STEPS_N=… STEPS_STEPS=0|3 STEPS_CONCURRENCY=… python steps_dbos_app.py produce|work

``produce`` enqueues STEPS_N workflows one call each (dequeuing none) and prints the rate;
``work`` processes the queue until stopped: ``worker_concurrency`` STEPS_CONCURRENCY, polling
every 10 ms, each workflow running STEPS_STEPS no-op steps.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

from dbos import DBOS, DBOSConfig

QUEUE = "bench"
STEPS = int(os.environ.get("STEPS_STEPS", "0"))

config: DBOSConfig = {
    "name": "bench",
    "system_database_url": f"sqlite:///{os.environ['STEPS_DB']}",
    "log_level": "WARNING",
}
DBOS(config=config)


@DBOS.step()
def noop_step() -> None:
    return None


@DBOS.workflow()
def noop_workflow(i: int) -> int:
    for _ in range(STEPS):
        noop_step()
    return i


def main(mode: str) -> None:
    if mode == "produce":
        DBOS.listen_queues([])  # this process only enqueues
    DBOS.launch()
    queue = DBOS.register_queue(
        QUEUE,
        worker_concurrency=int(os.environ.get("STEPS_CONCURRENCY", "64")),
        polling_interval_sec=0.01,
    )
    if mode == "produce":
        n = int(os.environ["STEPS_N"])
        start = time.perf_counter()
        for i in range(n):
            queue.enqueue(noop_workflow, i)
        took = time.perf_counter() - start
        print(json.dumps({"enqueue_per_second": round(n / took, 1)}), flush=True)
        DBOS.destroy()
        return
    threading.Event().wait()  # the queue's thread works until the bench stops the process


if __name__ == "__main__":
    main(sys.argv[1])
