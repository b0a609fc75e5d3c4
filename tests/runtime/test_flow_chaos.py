"""Fair share, order per key and limits together while workers are SIGKILLed at random for a
minute, both backends (docs/flow-control.md, "Fair share", "Order per key", "Concurrency
limits"). Three worker processes (flow_app.py) run three tasks: ``capped`` is fair across
tenants and capped at 2 running per tenant; ``step`` is ordered per key, with no limit;
``post`` is all three at once — fair across accounts, each account's jobs in id order, one
running per account. A share of the attempts
fail and are retried. Every few seconds a worker is SIGKILLed and another started. Batches
of jobs are fed for 50 s, each when fewer than BACKLOG are queued, so the load follows the
backend's and the host's pace and the rest drains in seconds once the kills stop.

Then, from the handlers' own records (the ledger) and the tables: no job lost (each reached
a final state, and each attempt is accounted for: its handler ran to an end, or its worker
was killed holding it); per account and per key, starts follow id order and attempts never
overlap; no tenant ever had more than 2 handlers running; and every job's rows tell one
story. A handler stopped by a kill counts as running until the kill: its process ran it
until then (its slot stays held longer still, until its lease is recovered).
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from collections import Counter, defaultdict
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from .conftest import (
    Proc,
    assert_consistent,
    read_ledger,
    rows,
    running_owners,
    status_counts,
    wait_for,
    worker_pids,
)
from .flow_app import PER_TENANT, build

APP = Path(__file__).with_name("flow_app.py")
CHAOS = 60.0  # seconds of kills
FEED = 50.0  # seconds of enqueues: the backlog drains while the kills go on
BACKLOG = 60  # jobs queued at most before another batch: the feed follows the workers' pace
LEASE = 3.0
TENANTS = {"A": 8, "B": 1, "C": 1}  # capped jobs per tenant per batch (A is the noisy one)
ACCOUNTS = [f"acct-{i}" for i in range(6)]
KEYS = ["k1", "k2", "k3"]  # ordered, without a limit: only the order keeps them one at a time
FAIL = 0.2  # the share of attempts that fail (then retried, up to 6 attempts)
pytestmark = pytest.mark.heavy


class Workers:
    def __init__(self, db_url: str, root: Path) -> None:
        self.db_url, self.root = db_url, root
        self.procs: list[Proc] = []
        self.killed_at: dict[int, float] = {}  # pid -> when it was SIGKILLed

    @property
    def ledger_dir(self) -> Path:
        return self.root / "ledger"

    def start(self) -> Proc:
        n = len(self.procs)
        out, err = self.root / f"chaos-{n}.out", self.root / f"chaos-{n}.err"
        cmd = [sys.executable, str(APP), "--db", self.db_url, "--ledger", str(self.ledger_dir)]
        cmd += ["--concurrency", "4", "--lease", str(LEASE), "--poll", "0.05"]
        env = {k: v for k, v in os.environ.items() if k != "ERRANDS_FAULT"}
        with out.open("wb") as o, err.open("wb") as e:
            proc = Proc(subprocess.Popen(cmd, stdout=o, stderr=e, env=env), out, err)
        self.procs.append(proc)
        return proc

    def kill(self, proc: Proc) -> None:
        self.killed_at[proc.pid] = time.time()
        proc.kill()

    def live(self) -> list[Proc]:
        return [p for p in self.procs if p.pid not in self.killed_at]

    def close(self) -> None:
        for proc in self.procs:
            if proc.alive():
                proc.kill()


def test_fair_ordered_and_capped_jobs_survive_a_minute_of_kills(
    db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    workers = Workers(db_url, tmp_path)
    ids: list[int] = []
    kills = 0
    try:
        with build(db_url) as producer:  # it has the tasks: its jobs carry their values
            for _ in range(3):
                workers.start()
            began = time.monotonic()
            next_kill = began + rng.uniform(2.0, 5.0)
            batch = 0
            while (elapsed := time.monotonic() - began) < CHAOS:
                if elapsed < FEED and status_counts(db_url)["queued"] < BACKLOG:
                    items: list[tuple[str, dict[str, Any]]] = [
                        ("capped", {"tenant": t, "seq": batch * 100 + i, "fail": FAIL})
                        for t, n in TENANTS.items()
                        for i in range(n)
                    ]
                    items += [
                        ("post", {"account": a, "seq": batch, "fail": FAIL}) for a in ACCOUNTS
                    ]
                    items += [
                        ("step", {"key": k, "seq": batch, "ms": 20, "fail": FAIL}) for k in KEYS
                    ]
                    rng.shuffle(items)  # the accounts' ids interleave
                    ids += producer.enqueue_many(items)
                    batch += 1
                if time.monotonic() >= next_kill:
                    # Preferably one running jobs (a worker still starting holds none).
                    busy = {pid for _, pid in running_owners(db_url)}
                    live = workers.live()
                    victim = rng.choice([p for p in live if p.pid in busy] or live)
                    workers.kill(victim)  # SIGKILL: mid-job, mid-claim or mid-commit
                    kills += 1
                    workers.start()
                    next_kill = time.monotonic() + rng.uniform(2.0, 5.0)
                time.sleep(rng.uniform(0.2, 0.6))

        def final() -> bool:
            for p in workers.live():
                assert p.alive(), p.stderr()
            c = status_counts(db_url)
            return c["succeeded"] + c["failed"] == len(ids)

        try:
            wait_for(final, 60, "every job to reach a final state", every=0.2)
        except AssertionError as exc:
            left = rows(
                db_url,
                "SELECT id, type, status, limit_group, attempts, worker_id FROM jobs "
                "WHERE status NOT IN ('succeeded', 'failed', 'cancelled') ORDER BY id LIMIT 12",
            )
            raise AssertionError(f"{exc}: {dict(status_counts(db_url))}; {left}") from None
        assert worker_pids(db_url)  # the survivors are still running: nothing was drained
    finally:
        workers.close()

    ledger = read_ledger(workers.ledger_dir)
    states = assert_consistent(db_url)
    assert sorted(states) == sorted(ids), "the jobs enqueued are the jobs stored"
    lost = no_attempt_lost(db_url, ledger, workers.killed_at)
    spans = attempts(ledger, workers.killed_at)
    assert_in_order(spans, "account")
    assert_in_order(spans, "key")
    peaks = assert_capped(spans, "tenant", PER_TENANT.running or 0)
    retried = sum(1 for s in spans if s["attempt"] > 1)
    with capsys.disabled():
        print(
            f"\n[figures] flow chaos (seed {seed}): {len(ids)} jobs, {kills} kills, "
            f"{len(spans)} handler starts, {retried} retries, {lost} lost attempts recovered, "
            f"states {dict(Counter(states.values()))}, peak running per tenant {peaks}"
        )
    # The chaos happened. Whether a kill lands on a running job is chance: in a CI-like run on
    # SQLite, 16 kills found none (its handlers run 2-20 ms), so lost attempts are reported in
    # the figures above rather than required; the order, cap and accounting checks hold either way.
    assert kills >= 10 and retried >= 10


def no_attempt_lost(db_url: str, ledger: list[dict[str, Any]], killed: dict[int, float]) -> int:
    """Each attempt the tables hold is accounted for: one that ended (succeeded or failed)
    ran its handler to an end; one lost belonged to a killed worker. Each handler start is
    an attempt the tables hold, started once. A failed job used all its attempts. Returns
    the number of lost attempts."""
    stored = {
        (int(job), int(n)): (status, str(worker))
        for job, n, status, worker in rows(
            db_url, "SELECT job_id, attempt, status, worker_id FROM job_attempts"
        )
    }
    starts = Counter((e["job"], e["attempt"]) for e in ledger if e["phase"] == "start")
    ends = {(e["job"], e["attempt"]) for e in ledger if e["phase"] == "end"}
    assert [k for k, n in starts.items() if n > 1] == [], "an attempt's handler started twice"
    assert set(starts) <= set(stored), "a handler ran an attempt the tables do not hold"
    lost = 0
    for key, (status, worker) in stored.items():
        if status in ("succeeded", "failed"):
            assert key in starts and key in ends, f"attempt {key} {status} but its handler did not"
        else:
            assert status == "lost", f"attempt {key} is {status} after every job was final"
            pid = int(worker.rsplit(":", 2)[1])
            assert pid in killed, f"attempt {key} lost by worker {pid}, which was not killed"
            lost += 1
    for job, attempts_used in rows(db_url, "SELECT id, attempts FROM jobs WHERE status = 'failed'"):
        assert attempts_used == 6, f"job {job} failed after {attempts_used} of 6 attempts"
    return lost


def attempts(ledger: list[dict[str, Any]], killed: dict[int, float]) -> list[dict[str, Any]]:
    """Each handler start with its end: the handler's own, or its process's kill."""
    ends = {(e["job"], e["attempt"]): e["t"] for e in ledger if e["phase"] == "end"}
    spans = []
    for e in ledger:
        if e["phase"] == "start":
            end = ends.get((e["job"], e["attempt"]))
            if end is None:
                assert e["pid"] in killed, f"{e}: no end, and its worker was not killed"
                end = killed[e["pid"]]
            spans.append({**e, "end": end})
    return spans


def assert_in_order(spans: list[dict[str, Any]], field: str) -> None:
    """Per value of ``field``: starts in id order (a retry before any later job), and each
    attempt over before the next starts."""
    by_value: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for s in spans:
        if field in s:
            by_value[s[field]].append(s)
    assert by_value, f"no handler of an ordered {field} ran"
    for value, mine in by_value.items():
        mine.sort(key=lambda s: s["t"])
        ids = [s["job"] for s in mine]
        assert ids == sorted(ids), f"{value}: starts out of id order"
        for a, b in pairwise(mine):
            assert a["end"] <= b["t"], f"{value}: #{b['job']} started while #{a['job']} ran"


def assert_capped(spans: list[dict[str, Any]], field: str, cap: int) -> dict[str, int]:
    """Per value of ``field``, never more than ``cap`` handlers running at once (an end
    before a start at the same instant); returns each value's peak."""
    marks: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for s in spans:
        if field in s:
            marks[s[field]] += [(s["t"], 1), (s["end"], -1)]
    peaks = {}
    for value, points in marks.items():
        running = peak = 0
        for _, step in sorted(points):
            running += step
            peak = max(peak, running)
        assert peak <= cap, f"{value}: {peak} running at once, over its cap of {cap}"
        peaks[value] = peak
    return peaks
