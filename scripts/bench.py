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

from errands.cli.bench.reporting import spread

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / "BENCHMARKS.md"
HEADER = """# Benchmarks

Figures from `errands bench` (appended by `scripts/bench.py`; newest last). Each phase runs on
a fresh temporary SQLite file. `raw insert` is stdlib sqlite3 doing one single-row INSERT per
transaction with the same pragmas (WAL, same `synchronous`): the floor under any durable
enqueue. The throughput phases run in rounds, each errands phase right after its raw baseline
(the host is noisy); the ratio is the median over rounds of those paired ratios. Pickup latency
is from `enqueue` returning (committed) to the handler starting. Compare figures only within
one machine.
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
    v = r["versions"]
    db = f"PostgreSQL {v['postgresql']}" if "postgresql" in v else f"filesystem {r['filesystem']}"
    lines = [
        f"### {now} — {r['backend']}, {os.cpu_count()} CPUs, {cpu_model()}",
        "",
        f"errands {v['errands']} (commit {git_commit()}), Python {v['python']}, "
        f"SQLite {sqlite3.sqlite_version}, {platform.system()} {platform.release()}, {db}; "
        f"{r['jobs']} jobs x {r['rounds']} rounds, durability={r['durability']}, "
        f"{r['processes']} processes x concurrency {r['concurrency']}; load average at the end "
        f"{r['load_average']}.",
        "",
        "| phase | errands jobs/s | errands min-max | raw jobs/s | raw min-max | ratio "
        "| best/best |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    raw, ours = r["raw"], r["errands"]
    for key, base, label in (
        ("enqueue", "insert", "`enqueue` one by one / raw insert, 1 tx per row"),
        ("enqueue_async", "insert", "`enqueue_async`, 1 task / raw insert"),
        ("enqueue_threads", "insert", "`enqueue`, 8 threads / raw insert"),
        ("enqueue_tasks", "insert", "`enqueue_async`, 64 tasks / raw insert"),
        ("enqueue_many", "bulk_insert", "`enqueue_many` / raw bulk insert, 1 tx"),
        ("process_1", "process", "processing, 1 `errands worker` / raw claims of 50"),
        (
            "process_p",
            "process_p",
            f"processing, {r['processes']} `errands worker` / raw claims of 50 by "
            f"{r['processes']} processes",
        ),
    ):
        if key not in ours:  # a result from before the producer phases
            continue
        lines.append(
            f"| {label} | {ours[key]['per_second']:,.0f} | {spread(ours[key])} | "
            f"{raw[base]['per_second']:,.0f} | {spread(raw[base])} | "
            f"**{r['ratios'][key]:.2f}x** | {r['ratios_best'][key]:.2f}x |"
        )
    audited = r.get("ratios_audited")
    if audited:  # absent from a result of before #26's third sitting
        lines.append(
            f"| `enqueue` one by one / raw insert + its audit row, 1 tx per job | "
            f"{ours['enqueue']['per_second']:,.0f} | {spread(ours['enqueue'])} | "
            f"{raw['insert_audited']['per_second']:,.0f} | {spread(raw['insert_audited'])} | "
            f"**{audited['enqueue']:.2f}x** | "
            f"{ours['enqueue']['per_second'] / raw['insert_audited']['per_second']:.2f}x |"
        )
    many = r.get("producers")
    if many:
        lines += ["", producer_line(ours, many)]
    p, idle = r["pickup"], r["idle"]
    lines += [
        "",
        f"jobs/s: the best of {r['rounds']} rounds; min-max: the slowest and fastest rounds; "
        f"ratio: median of {r['rounds']} paired rounds (errands / raw measured in the same "
        "round, with as many processes); best/best: best errands / best raw. Scaling, "
        f"{r['processes']} processes / 1 (median of paired rounds): errands "
        f"{r['scaling']['errands']:.2f}x, raw {r['scaling']['raw']:.2f}x.",
        "",
        f"Pickup, producer process → idle worker process ({p['samples']} jobs): "
        f"p50 {p['p50_ms']} ms, p95 {p['p95_ms']} ms, p99 {p['p99_ms']} ms, max {p['max_ms']} ms. "
        f"Idle worker CPU over {idle['seconds']:g} s: {idle['cpu_percent']}% of one core.",
    ]
    return "\n".join(lines) + "\n"


def producer_line(ours: dict[str, Any], many: dict[str, Any]) -> str:
    lat = "; ".join(
        f"{key} p50 {ours[key]['p50_ms']} ms, p99 {ours[key]['p99_ms']} ms"
        for key in ("enqueue", "enqueue_async", "enqueue_threads", "enqueue_tasks")
    )
    return (
        f"Producers — latency per call (best round): {lat}. Many against one (median of the "
        f"rounds' paired figures): 8 threads / 1 thread "
        f"**{many['enqueue_threads']['speedup']:.2f}x** jobs/s, p99 "
        f"{many['enqueue_threads']['p99_ratio']:.2f}x; 64 tasks / 1 task "
        f"**{many['enqueue_tasks']['speedup']:.2f}x** jobs/s, p99 "
        f"{many['enqueue_tasks']['p99_ratio']:.2f}x."
    )


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
