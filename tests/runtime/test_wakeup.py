"""Cross-process wake-up: with poll_interval=30 a job enqueued by another process is picked up
at once (SQLite: the worker's PRAGMA data_version listener), and an idle worker stays near 0% CPU.

The worker runs with the library's default lease (60 s) and heartbeat (15 s), so its own writes
wake it only every few seconds: without a working listener most pickups would miss the 3 s
deadline below. The figures are printed, not asserted (the machine is shared)."""

from __future__ import annotations

import os
import random
import statistics
import threading
import time

import pytest

import errands

from .conftest import Cluster, figures, starts, wait_for

PICKUP_DEADLINE = 3.0


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # utime and stime are fields 14 and 15 of stat(5); fields[0] here is field 3.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(
    cluster: Cluster,
    queue: errands.Queue,
    capsys: pytest.CaptureFixture[str],
    *,
    samples: int,
    idle_seconds: float,
    name: str,
) -> None:
    worker = cluster.worker("--poll", "30", "--lease", "60", "--heartbeat", "15")
    cluster.wait_registered(worker)
    time.sleep(0.5)  # past its first claim: from here on it waits for a wake-up

    rng = random.Random()
    latencies = []
    for seq in range(samples):
        time.sleep(rng.uniform(0.05, 0.25))
        job_id = queue.enqueue("ledger_job", {"seq": seq})

        def picked(seq: int = seq) -> list[dict[str, float]]:
            return starts(cluster.ledger(), seq)

        (entry,) = wait_for(picked, PICKUP_DEADLINE, f"job {job_id} to be picked up", every=0.005)
        job = queue.get(job_id)
        assert job is not None and job.created_at is not None
        latencies.append(entry["t"] - job.created_at.timestamp())

    wait_for(lambda: queue.stats()["counts"]["succeeded"] == samples, 10, "the last outcome")
    time.sleep(0.5)
    if not os.path.exists(f"/proc/{worker.pid}/stat"):
        pytest.skip("no /proc on this system: idle CPU not measured")
    t0, c0 = time.monotonic(), cpu_seconds(worker.pid)
    time.sleep(idle_seconds)
    cpu = (cpu_seconds(worker.pid) - c0) / (time.monotonic() - t0) * 100
    assert worker.stop() == 0, worker.stderr()
    worker.assert_clean_log()

    ms = sorted(x * 1000 for x in latencies)
    p95 = ms[min(len(ms) - 1, int(0.95 * len(ms)))]
    figures(
        capsys,
        name,
        samples=samples,
        pickup_median_ms=round(statistics.median(ms), 1),
        pickup_p95_ms=round(p95, 1),
        pickup_max_ms=round(ms[-1], 1),
        idle_cpu_percent=round(cpu, 2),
        idle_seconds=idle_seconds,
    )
    assert cpu < 30, f"an idle worker used {cpu:.1f}% CPU"


def test_cross_process_wakeup_and_idle_cpu(
    cluster: Cluster, queue: errands.Queue, capsys: pytest.CaptureFixture[str]
) -> None:
    measure(cluster, queue, capsys, samples=20, idle_seconds=5, name="wake-up")


@pytest.mark.slow
def test_cross_process_wakeup_and_idle_cpu_long(
    cluster: Cluster, queue: errands.Queue, capsys: pytest.CaptureFixture[str]
) -> None:
    measure(cluster, queue, capsys, samples=200, idle_seconds=30, name="wake-up-long")


def test_concurrent_producers_bursts_each_wake_an_idle_worker(
    cluster: Cluster, queue: errands.Queue
) -> None:
    """8 threads enqueue at once, then stop; the worker (poll every 30 s) must be woken for
    each burst. On PostgreSQL most of these enqueues leave their NOTIFY to the Waker (another
    enqueue of the process is in flight), which sends one after the burst's commits: a burst
    whose last jobs got no NOTIFY after their commit would wait out the 30 s poll."""
    worker = cluster.worker("--poll", "30", "--lease", "60", "--heartbeat", "15")
    cluster.wait_registered(worker)
    time.sleep(0.5)  # past its first claim: from here on it waits for a wake-up
    threads, per_thread, bursts = 8, 4, 12
    done = 0
    for burst in range(bursts):
        start = threading.Barrier(threads)

        def produce(k: int, burst: int = burst, start: threading.Barrier = start) -> None:
            # Short pauses between calls: the worker goes idle within a burst too, so a job
            # whose wake-up was lost (its enqueue overlapped another) would wait for the poll.
            pause = random.Random(burst * threads + k)
            start.wait()
            for i in range(per_thread):
                time.sleep(pause.uniform(0, 0.03))
                queue.enqueue("ledger_job", {"seq": (burst * threads + k) * per_thread + i})

        pool = [threading.Thread(target=produce, args=(k,)) for k in range(threads)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
        done += threads * per_thread

        def all_done(done: int = done) -> bool:
            return bool(queue.stats()["counts"]["succeeded"] == done)

        wait_for(
            all_done,
            PICKUP_DEADLINE * 3,
            f"burst {burst}'s {threads * per_thread} jobs (the worker polls only every 30 s)",
        )
    assert worker.stop() == 0, worker.stderr()
    worker.assert_clean_log()
