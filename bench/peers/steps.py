"""Durable steps against DBOS Transact, both on SQLite, in one sitting (issue #33):

    python bench/peers/steps.py [--jobs N] [--concurrency C] [--rounds R]   (make bench-peers)

The workload: N queued jobs (DBOS: queued workflows), each doing nothing, or recording three
no-op steps (errands: ``ctx.step``; DBOS: ``@DBOS.step``), enqueued one call each first,
then processed by a worker started afterwards, timed from its start until the store says
every one is done (worker start-up inside the time for both; a worker still busy after
TIMEOUT is measured on what it finished). DBOS runs in its own
virtual environment (bench/.venvs/dbos, installed from PyPI on first use): its producer
process enqueues with ``DBOS.listen_queues([])`` (so it dequeues nothing), its worker process
listens to the queue with ``worker_concurrency`` C and a 10 ms polling interval; errands runs
``errands worker --concurrency C``. Both at their default durability (SQLite's
synchronous=FULL). Prints one JSON object and writes it to bench/results/steps.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
DBOS_VENV = ROOT / "bench" / ".venvs" / "dbos"
TIMEOUT = 120.0  # per worker run; a slower one is measured on what it finished


def dbos_python() -> Path:
    py = DBOS_VENV / "bin" / "python"
    if not py.exists():
        print(f"[steps] installing dbos into {DBOS_VENV} …", file=sys.stderr, flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(DBOS_VENV)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", "dbos"], check=True)
    return py


def count(path: str, sql: str) -> int:
    try:
        conn = sqlite3.connect(path, timeout=30)
    except sqlite3.Error:
        return 0
    try:
        return int(conn.execute(sql).fetchone()[0])
    except sqlite3.Error:  # the schema is not there yet
        return 0
    finally:
        conn.close()


def drain(cmd: list[str], env: dict[str, str], path: str, sql: str, n: int, log: str) -> float:
    """Start a worker process, wait until ``sql`` counts n done, stop it; seconds taken."""
    start = time.perf_counter()
    with open(log, "ab") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            while count(path, sql) < n:
                if proc.poll() is not None:
                    raise RuntimeError(f"{cmd[:4]} exited with {proc.returncode}; see {log}")
                if time.perf_counter() - start > TIMEOUT:
                    done = count(path, sql)
                    print(f"[steps] {done} of {n} done after {TIMEOUT:g} s", file=sys.stderr)
                    return (time.perf_counter() - start) * n / max(done, 1)
                time.sleep(0.01)
            return time.perf_counter() - start
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def run_dbos(n: int, steps: int, concurrency: int, tmp: str) -> dict[str, Any]:
    py = str(dbos_python())
    path = os.path.join(tmp, f"dbos_{steps}.sqlite")
    env = {**os.environ, "STEPS_DB": path, "STEPS_N": str(n), "STEPS_STEPS": str(steps)}
    env["STEPS_CONCURRENCY"] = str(concurrency)
    app = str(HERE / "steps_dbos_app.py")
    out = subprocess.run([py, app, "produce"], env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"dbos producer failed: {out.stderr.strip().splitlines()[-3:]}")
    enqueue = json.loads(out.stdout.strip().splitlines()[-1])["enqueue_per_second"]
    sql = "SELECT count(*) FROM workflow_status WHERE status = 'SUCCESS'"
    took = drain([py, app, "work"], env, path, sql, n, os.path.join(tmp, "dbos.log"))
    version = subprocess.run(
        [py, "-c", "import importlib.metadata as m; print(m.version('dbos'))"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    return {"enqueue": enqueue, "process": round(n / took, 1), "version": version}


def run_errands(n: int, steps: int, concurrency: int, tmp: str) -> dict[str, Any]:
    import errands
    from errands.cli.bench.app import DB_ENV, DURABILITY_ENV

    path = os.path.join(tmp, f"errands_{steps}.db")
    task = "steps3" if steps else "noop"
    with errands.Queue(path) as q:
        start = time.perf_counter()
        for i in range(n):
            q.enqueue(task, {"i": i})
        enqueue = n / (time.perf_counter() - start)
    env = {k: v for k, v in os.environ.items() if k != "ERRANDS_DB"}
    env.update({DB_ENV: path, DURABILITY_ENV: "full"})
    cmd = [sys.executable, "-m", "errands", "worker", "--app", "errands.cli.bench.app:q"]
    cmd += ["--concurrency", str(concurrency), "--quiet"]
    sql = "SELECT count(*) FROM jobs WHERE status = 'succeeded'"
    took = drain(cmd, env, path, sql, n, os.path.join(tmp, "errands.log"))
    return {"enqueue": round(enqueue, 1), "process": round(n / took, 1)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=2000)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--rounds", type=int, default=1)
    a = p.parse_args()
    rounds = []
    for r in range(a.rounds):
        row: dict[str, Any] = {}
        for lib, run in (("dbos", run_dbos), ("errands", run_errands)):
            for steps in (0, 3):
                with tempfile.TemporaryDirectory(prefix="peer-steps-") as tmp:
                    got = run(a.jobs, steps, a.concurrency, tmp)
                row[f"{lib}_{steps}"] = got
                print(f"[steps] round {r + 1}: {lib}, {steps} steps: {got}", file=sys.stderr)
        rounds.append(row)
    out = {
        "jobs": a.jobs,
        "concurrency": a.concurrency,
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "rounds": rounds,
        "three_steps_vs_dbos": [
            round(r["errands_3"]["process"] / r["dbos_3"]["process"], 1) for r in rounds
        ],
    }
    results = ROOT / "bench" / "results"
    results.mkdir(parents=True, exist_ok=True)
    (results / "steps.json").write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
