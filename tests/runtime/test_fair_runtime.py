"""Fair share across real worker processes, both backends (docs/flow-control.md, "Fair
share"): a tenant enqueued behind another's backlog is served in turn, weights give their
ratio of starts, and fair jobs capped per tenant keep their cap and turns while a worker is
SIGKILLed — measured from the handlers' own records. Both fail on a claim that
takes due jobs in run_at then id order (today's main: all of A first).
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .conftest import Proc, read_ledger, status_counts, wait_for, worker_pids
from .flow_app import build

APP = Path(__file__).with_name("flow_app.py")
pytestmark = pytest.mark.heavy


class Workers:
    def __init__(self, db_url: str, root: Path) -> None:
        self.db_url, self.root, self.procs = db_url, root, list[Proc]()

    def start(self, n: int, concurrency: int = 4) -> None:
        for i in range(n):
            out, err = self.root / f"fair-{i}.out", self.root / f"fair-{i}.err"
            cmd = [sys.executable, str(APP), "--db", self.db_url, "--ledger", str(self.ledger_dir)]
            cmd += ["--concurrency", str(concurrency), "--poll", "0.2"]
            with out.open("wb") as o, err.open("wb") as e:
                self.procs.append(Proc(subprocess.Popen(cmd, stdout=o, stderr=e), out, err))

    @property
    def ledger_dir(self) -> Path:
        return self.root / "ledger"

    def ends(self) -> list[dict[str, Any]]:
        rows = read_ledger(self.ledger_dir)
        return sorted((r for r in rows if r["phase"] == "end"), key=lambda r: r["t"])

    def close(self) -> None:
        for proc in self.procs:
            if proc.alive():
                proc.kill()


@pytest.fixture
def workers(db_url: str, tmp_path: Path) -> Iterator[Workers]:
    w = Workers(db_url, tmp_path)
    try:
        yield w
    finally:
        w.close()


def backlog(db_url: str, counts: dict[str, int], task: str = "share") -> None:
    with build(db_url) as q:  # the producer has the fair task: its jobs carry their value
        for tenant, n in counts.items():
            items = [(task, {"tenant": tenant, "seq": i}) for i in range(n)]
            for start in range(0, n, 1000):
                q.enqueue_many(items[start : start + 1000])


def test_a_tenant_behind_a_backlog_is_done_long_before_it(db_url: str, workers: Workers) -> None:
    backlog(db_url, {"A": 5000, "B": 50})
    workers.start(2, concurrency=4)

    def b_done() -> bool:
        for proc in workers.procs:
            assert proc.alive(), proc.stderr()
        return Counter(r["tenant"] for r in workers.ends())["B"] >= 50

    wait_for(b_done, 60, "B's 50 jobs to be done")
    ends = workers.ends()
    last_b = max(i for i, r in enumerate(ends) if r["tenant"] == "B")
    a_before = sum(1 for r in ends[: last_b + 1] if r["tenant"] == "A")
    assert a_before < 200, f"A finished {a_before} before B's 50 were done"
    assert worker_pids(db_url)  # still running: nothing above waited on A's backlog


def test_weights_3_to_1_hold_within_a_tenth_over_2000_jobs(db_url: str, workers: Workers) -> None:
    backlog(db_url, {"A": 1500, "gold": 1500})
    workers.start(2, concurrency=4)
    wait_for(lambda: len(workers.ends()) >= 2000, 60, "2,000 jobs done")
    got = Counter(r["tenant"] for r in workers.ends()[:2000])
    ratio = got["gold"] / got["A"]
    assert 2.7 <= ratio <= 3.3, got


def test_fair_and_capped_jobs_survive_killed_workers_within_their_caps(
    db_url: str, workers: Workers
) -> None:
    backlog(db_url, {"A": 150, "B": 30, "C": 30}, task="capped")
    workers.start(2, concurrency=4)
    wait_for(lambda: len(workers.ends()) >= 40, 60, "40 jobs done")
    killed, killed_at = workers.procs[0].pid, time.time()
    workers.procs[0].kill()  # SIGKILL mid-run: its jobs are recovered by the rescuer
    workers.start(1, concurrency=4)
    wait_for(lambda: status_counts(db_url)["succeeded"] == 210, 90, "every job to succeed")
    # Per tenant, never more than the cap running at once, from the handlers' own records (a
    # killed handler stopped when its process was killed).
    rows = read_ledger(workers.ledger_dir)
    ended = {(r["job"], r["pid"]) for r in rows if r["phase"] == "end"}
    marks = [(r["t"], 1 if r["phase"] == "start" else -1, r["tenant"]) for r in rows]
    marks += [
        (killed_at, -1, r["tenant"])
        for r in rows
        if r["phase"] == "start" and r["pid"] == killed and (r["job"], r["pid"]) not in ended
    ]
    running: Counter[str] = Counter()
    for _, step, tenant in sorted(marks):
        running[tenant] += step
        assert running[tenant] <= 2, f"{tenant}: {running[tenant]} running at once"
    # B and C are done long before A: they took turns with it.
    ends = workers.ends()
    last_bc = max(i for i, r in enumerate(ends) if r["tenant"] in "BC")
    assert sum(1 for r in ends[: last_bc + 1] if r["tenant"] == "A") < 120
