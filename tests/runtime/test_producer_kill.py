"""Durability of concurrent producers: a process whose 8 threads enqueue (grouped commits on
SQLite) is SIGKILLed mid-way; every id an ``enqueue`` call returned is in the database."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from helpers.support import wait_for

from .conftest import rows

APP = Path(__file__).with_name("threaded_producer.py")
THREADS = 8


def acked(out: Path) -> list[int]:
    ids = []
    for f in out.glob("acked-*"):
        ids += [int(line) for line in f.read_text().split("\n") if line]
    return ids


def test_every_id_an_enqueue_returned_survives_a_sigkill_of_its_process(
    db_url: str, tmp_path: Path
) -> None:
    import errands

    errands.Queue(db_url).close()  # the schema, before the producer's threads race to it
    out = tmp_path / "acked"
    out.mkdir()
    err = tmp_path / "stderr"
    with open(err, "wb") as e:
        child = subprocess.Popen(
            [sys.executable, str(APP), db_url, str(out), str(THREADS)],
            stdout=subprocess.DEVNULL,
            stderr=e,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    try:
        wait_for(lambda: len(acked(out)) >= 300 or child.poll() is not None, what="300 acks")
        assert child.poll() is None, err.read_text()[-2000:]
        child.send_signal(signal.SIGKILL)  # mid-way: its threads are enqueueing
    finally:
        child.kill()
        child.wait()
    ids = acked(out)
    stored = {r[0] for r in rows(db_url, "SELECT id FROM jobs")}
    assert len(ids) >= 300 and len(set(ids)) == len(ids)
    assert sorted(set(ids) - stored) == []
