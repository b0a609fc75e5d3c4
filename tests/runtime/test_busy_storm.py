"""Busy storm: producers and workers keep writing while another connection holds the write
lock, first for less than the busy timeout, then for longer. Nothing escapes as an exception,
producers get DatabaseBusyError with its explanation, and every acknowledged job completes."""

from __future__ import annotations

import time

import pytest

import errands

from .conftest import (
    Cluster,
    assert_consistent,
    assert_integrity,
    figures,
    rows,
    wait_for,
    write_lock,
)

BUSY_TIMEOUT = 5.0
BUSY_MESSAGE = "stayed locked by another connection past the busy timeout"


def test_busy_storm(
    cluster: Cluster, queue: errands.Queue, capsys: pytest.CaptureFixture[str]
) -> None:
    url = cluster.db_url
    bt = ("--busy-timeout", str(BUSY_TIMEOUT))
    workers = [cluster.worker("--concurrency", "4", *bt) for _ in range(2)]
    for w in workers:
        cluster.wait_registered(w)
    producers = [
        cluster.start(
            "produce", "--seconds", "13", "--pause", "0.01", "--start", str(i * 100_000), *bt
        )
        for i in range(3)
    ]
    time.sleep(0.5)
    short = (time.time(), time.time() + 3.0)
    with write_lock(url):
        time.sleep(3.0)  # shorter than the busy timeout: everyone just waits
    time.sleep(0.5)
    with write_lock(url):
        time.sleep(BUSY_TIMEOUT + 2.0)  # longer: writers give up with DatabaseBusyError

    acked: set[int] = set()
    busy: list[tuple[float, str]] = []
    for p in producers:
        assert p.wait(60) == 0, p.stderr()
        assert "Traceback" not in p.stderr(), p.stderr()
        for line in p.stdout().splitlines():
            kind, rest = line.split(" ", 1)
            if kind == "OK":
                acked.add(int(rest.split()[0]))
            else:
                assert kind == "BUSY", line
                _, when, message = rest.split(" ", 2)
                busy.append((float(when), message))
    assert busy, "no producer ever gave up although the lock outlived the busy timeout"
    assert all(BUSY_MESSAGE in m and "busy_timeout" in m for _, m in busy), busy[:3]
    assert not [t for t, _ in busy if short[0] <= t <= short[1] + 0.5], (
        "a writer gave up while the lock was held for less than the busy timeout"
    )

    def all_done() -> bool:
        done = {r[0] for r in rows(url, "SELECT id FROM jobs WHERE status = 'succeeded'")}
        return acked <= done

    wait_for(all_done, 120, "every acknowledged job to complete after the storm", every=0.2)
    for w in workers:
        assert w.stop() == 0, w.stderr()
        w.assert_clean_log()
        assert "database is locked" not in "".join(
            ln for ln in w.stderr().splitlines() if not ln.startswith(("WARNING", "INFO"))
        )
    assert_integrity(url)
    states = assert_consistent(url)
    assert set(states.values()) <= {"succeeded", "queued"}
    figures(
        capsys,
        "busy-storm",
        acknowledged=len(acked),
        busy_errors=len(busy),
        worker_warnings=sum(w.stderr().count("WARNING") for w in workers),
    )
