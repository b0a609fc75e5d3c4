#!/usr/bin/env python3
"""Run ``errands bench --json`` and append a dated record to BENCHMARKS.md.

    .venv/bin/python scripts/bench.py [extra errands bench options, e.g. --jobs 20000]

The record names the machine (CPU count and model), Python, SQLite, errands and the git commit,
so figures from different machines and versions are never compared by accident.
"""

from __future__ import annotations

import json
import os
import platform
import sqlite3
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "BENCHMARKS.md"
HEADER = """# Benchmarks

Figures from `errands bench` (appended by `scripts/bench.py`; newest last). Each phase runs on
a fresh temporary SQLite file. `raw insert` is stdlib sqlite3 doing one single-row INSERT per
transaction with the same pragmas (WAL, same `synchronous`): the floor under any durable
enqueue. Pickup latency is from `enqueue` returning (committed) to the handler starting.
Compare figures only within one machine.
"""


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def git_commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        return out + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def record(r: dict[str, Any]) -> str:
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    lat = r["latency"]
    lines = [
        f"## {now} — {os.cpu_count()} CPUs, {cpu_model()}",
        "",
        f"errands {r['versions']['errands']} (commit {git_commit()}), "
        f"Python {r['versions']['python']}, SQLite {sqlite3.sqlite_version}, "
        f"{platform.system()} {platform.release()}, filesystem {r['filesystem']}; "
        f"{r['jobs']} jobs, durability={r['durability']}, concurrency {r['concurrency']}.",
        "",
        "| phase | seconds | jobs/s |",
        "|---|---:|---:|",
    ]
    for key, label in (
        ("raw_insert", "raw sqlite3 insert, bare table, 1 tx/row"),
        ("raw_job_insert", "raw sqlite3 insert into errands' `jobs` table, 1 tx/row"),
        ("enqueue", "`q.enqueue` one by one"),
        ("enqueue_without_enqueued_event", "`q.enqueue`, audit without `ENQUEUED`"),
        ("enqueue_many", "`q.enqueue_many` (one tx)"),
        ("process", "process no-op jobs (`run_worker(burst=True)`)"),
    ):
        m = r[key]
        lines.append(f"| {label} | {m['seconds']:.3f} | {m['per_second']:,.0f} |")
    lines += [
        "",
        f"enqueue / raw insert: **{r['enqueue_vs_raw_insert']:.2f}x** (bare table), "
        f"**{r['enqueue_vs_raw_job_insert']:.2f}x** (jobs table)",
        "",
        "| pickup latency | median | p95 | max |",
        "|---|---:|---:|---:|",
    ]
    for key, label in (
        ("same_queue", "same Queue (in-process wake-up)"),
        ("other_connection", "another connection (as another process)"),
    ):
        m = lat[key]
        lines.append(
            f"| {label}, {m['samples']} jobs | {m['median_ms']:.2f} ms | "
            f"{m['p95_ms']:.2f} ms | {m['max_ms']:.2f} ms |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    proc = subprocess.run(
        [sys.executable, "-m", "errands", "bench", "--json", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr)
        print(f"bench.py: errands bench failed (exit {proc.returncode})", file=sys.stderr)
        return proc.returncode
    entry = record(json.loads(proc.stdout))
    text = TARGET.read_text() if TARGET.exists() else HEADER
    TARGET.write_text(text.rstrip("\n") + "\n\n" + entry)
    print(entry)
    print(f"appended to {TARGET}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
