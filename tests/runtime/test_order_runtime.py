"""Order per key across real worker processes, both backends (docs/flow-control.md, "Order
per key"): 3 keys x 200 jobs whose attempts fail at random and are retried, 2 workers, one
SIGKILLed mid-run — per key, the handlers' own records show starts in id order (a retry
before any later job) and never two attempts of one key running at once.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections import defaultdict
from itertools import pairwise
from pathlib import Path

import pytest

from .conftest import Proc, read_ledger, status_counts, wait_for
from .flow_app import build

APP = Path(__file__).with_name("flow_app.py")
KEYS, PER_KEY = ("k1", "k2", "k3"), 200
pytestmark = pytest.mark.heavy


def start(db_url: str, root: Path, n: int) -> Proc:
    out, err = root / f"order-{n}.out", root / f"order-{n}.err"
    cmd = [sys.executable, str(APP), "--db", db_url, "--ledger", str(root / "ledger")]
    cmd += ["--lease", "3", "--poll", "0.05"]  # a short lease: a killed head is recovered soon
    with out.open("wb") as o, err.open("wb") as e:
        return Proc(subprocess.Popen(cmd, stdout=o, stderr=e), out, err)


def test_keys_start_in_id_order_and_never_overlap_through_failures_and_a_kill(
    db_url: str, tmp_path: Path
) -> None:
    with build(db_url) as q:  # interleaved keys: each key's ids are spread out
        q.enqueue_many([("step", {"key": k, "seq": i}) for i in range(PER_KEY) for k in KEYS])
    procs = [start(db_url, tmp_path, 0), start(db_url, tmp_path, 1)]
    try:

        def ended() -> int:
            return sum(1 for r in read_ledger(tmp_path / "ledger") if r["phase"] == "end")

        wait_for(lambda: ended() >= 150, 40, "150 attempts done")
        killed, killed_at = procs[0].pid, time.time()
        procs[0].kill()  # SIGKILL mid-run: its heads wait for the rescuer
        procs.append(start(db_url, tmp_path, 2))

        def final() -> bool:
            for p in procs[1:]:
                assert p.alive(), p.stderr()
            c = status_counts(db_url)
            return c["succeeded"] + c["failed"] == len(KEYS) * PER_KEY

        wait_for(final, 55, "every job to finish", every=0.2)
    finally:
        for p in procs:
            if p.alive():
                p.kill()
    rows = read_ledger(tmp_path / "ledger")
    ends = {(r["job"], r["attempt"]): r["t"] for r in rows if r["phase"] == "end"}
    by_key: dict[str, list[tuple[float, float, int]]] = defaultdict(list)
    for r in rows:
        if r["phase"] == "start":
            # A handler the kill stopped ran until the kill.
            default = killed_at if r["pid"] == killed else float("inf")
            end = ends.get((r["job"], r["attempt"]), default)
            by_key[r["key"]].append((r["t"], end, r["job"]))
    assert set(by_key) == set(KEYS)
    for key, attempts in by_key.items():
        attempts.sort()
        ids = [job for _, _, job in attempts]
        assert ids == sorted(ids), f"{key}: starts out of id order"
        assert len(set(ids)) == PER_KEY, f"{key}: {len(set(ids))} jobs started"
        for (_, end, job), (start_t, _, nxt) in pairwise(attempts):
            assert end <= start_t, f"{key}: #{nxt} started while #{job} ran"
    retried = sum(1 for r in rows if r["phase"] == "start" and r["attempt"] > 1)
    assert retried > 50  # failures were retried in place
