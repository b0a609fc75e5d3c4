#!/usr/bin/env python3
"""Run the same workload against errands and its peers, in one sitting; write a table.

    python bench/peers/run.py [--jobs N] [--only huey,rq]      (or: make bench-peers)

Each peer is installed from PyPI into its own virtual environment under bench/.venvs/ (created
on first use; delete a directory to reinstall), so no peer's dependencies touch errands' own
environment. errands runs from the project's .venv. PostgreSQL peers need the server at
--pg (default 127.0.0.1:5432, trust) and create their own databases
(errands_peer_<name>); RQ needs Redis at --redis (db 13 is flushed). Each peer also
enqueues from 8 threads at once (workload.py: ``enqueue_threads``, p50/p99 per call). Results go to
bench/results/peers.json and bench/results/peers.md, with each library's version.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
VENVS = ROOT / "bench" / ".venvs"
RESULTS = ROOT / "bench" / "results"

# peer -> (pip requirement, distribution name whose version is recorded, backing store)
PEERS: dict[str, tuple[list[str], str, str]] = {
    "errands": ([], "errands", "SQLite"),
    "errands-normal": ([], "errands", "SQLite"),
    "errands-pg": ([], "errands", "PostgreSQL"),
    "huey": (["huey"], "huey", "SQLite (SqliteHuey)"),
    "litequeue": (["litequeue"], "litequeue", "SQLite"),
    "persist-queue": (["persist-queue"], "persist-queue", "SQLite (SQLiteAckQueue)"),
    "procrastinate": (["procrastinate[psycopg]", "psycopg[binary]"], "procrastinate", "PostgreSQL"),
    "pgqueuer": (["pgqueuer", "psycopg[binary]"], "pgqueuer", "PostgreSQL"),
    "rq": (["rq", "redis"], "rq", "Redis"),
    "rq-simple": (["rq", "redis"], "rq", "Redis"),
}


def python_for(peer: str) -> Path:
    if peer.startswith("errands"):
        return ROOT / ".venv" / "bin" / "python"
    venv = VENVS / ("rq" if peer == "rq-simple" else peer)
    py = venv / "bin" / "python"
    if not py.exists():
        print(f"[peers] installing {peer} into {venv} …", file=sys.stderr, flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", *PEERS[peer][0]], check=True)
    return py


def version(py: Path, dist: str) -> str:
    out = subprocess.run(
        [str(py), "-c", f"import importlib.metadata as m; print(m.version({dist!r}))"],
        capture_output=True,
        text=True,
    )
    return out.stdout.strip() or "unknown"


def run_peer(peer: str, jobs: int, pg: str, redis: str) -> dict[str, Any]:
    py = python_for(peer)
    with tempfile.TemporaryDirectory(prefix=f"peer-{peer}-") as tmp:
        env = {**os.environ, "PEER_LOG": os.path.join(tmp, "worker.log")}
        cmd = [str(py), str(HERE / "workload.py"), peer, "--jobs", str(jobs), "--dir", tmp]
        cmd += ["--pg", pg, "--redis", redis]
        started = time.monotonic()
        out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
        log = Path(env["PEER_LOG"]).read_text() if Path(env["PEER_LOG"]).exists() else ""
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode != 0 or not lines:
        tail = (out.stderr.strip() or log.strip()).splitlines()[-3:]
        return {"peer": peer, "error": " / ".join(tail) or f"exit {out.returncode}"}
    result: dict[str, Any] = json.loads(lines[-1])
    result["version"] = version(py, PEERS[peer][1])
    result["store"] = PEERS[peer][2]
    result["wall_seconds"] = round(time.monotonic() - started, 1)
    return result


def table(results: list[dict[str, Any]], jobs: int) -> str:
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    lines = [
        f"### Peers, {jobs:,} no-op jobs — {now}",
        "",
        f"{os.cpu_count()} CPUs, {platform.system()} {platform.release()}, Python "
        f"{platform.python_version()}; load average at the end {load}.",
        "",
        "| library | version | store | enqueue one by one, jobs/s | enqueue, 8 threads, jobs/s "
        "| 8 threads: p50 / p99 ms per call | process, jobs/s | how |",
        "|---|---|---|---:|---:|---:|---:|---|",
    ]
    for r in results:
        if "error" in r:
            lines.append(f"| {r['peer']} | | | failed: {r['error'][:120]} | | |")
            continue
        many = f"{r['enqueue_threads']:,.0f}" if "enqueue_threads" in r else "—"
        lat = f"{r['p50_ms']} / {r['p99_ms']}" if "p50_ms" in r else "—"
        lines.append(
            f"| {r['peer']} | {r['version']} | {r['store']} | {r['enqueue']:,.0f} | {many} | "
            f"{lat} | {r['process']:,.0f} | {r['how']} |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int, default=10000)
    p.add_argument("--only", help="comma-separated peers (default: all)")
    p.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/postgres")
    p.add_argument("--redis", default="redis://127.0.0.1:6379/13")
    a = p.parse_args()
    peers = a.only.split(",") if a.only else list(PEERS)
    results = []
    for peer in peers:
        print(f"[peers] {peer} …", file=sys.stderr, flush=True)
        r = run_peer(peer, a.jobs, a.pg, a.redis)
        print(f"[peers] {peer}: {r}", file=sys.stderr, flush=True)
        results.append(r)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "peers.json").write_text(json.dumps(results, indent=2) + "\n")
    text = table(results, a.jobs)
    (RESULTS / "peers.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
