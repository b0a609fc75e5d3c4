"""The CI smoke test of ``errands bench``: it runs every phase end to end on each backend,
reports every figure in the documented shape, and every job of every phase completes.

No figure is compared with a threshold: the machines running tests are shared and noisy.
Performance is recorded in BENCHMARKS.md, not asserted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

JOBS = 2000


def bench(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "ERRANDS_DB"}
    return subprocess.run(
        [sys.executable, "-W", "error", "-m", "errands", "bench", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
    )


def bench_schemas(url: str) -> list[str]:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'errands_bench_%'"
        ).fetchall()
    return [r[0] for r in rows]


def test_bench_json_reports_every_phase_and_completes_every_job(
    db_url: str, is_sqlite: bool, tmp_path: Path
) -> None:
    where = ["--dir", str(tmp_path)] if is_sqlite else ["--db", db_url]
    r = bench(tmp_path, "--jobs", str(JOBS), "--json", *where)
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    # Progress went to stderr, phase by phase.
    assert "[errands bench] pickup p50" in r.stderr

    assert result["backend"] == ("sqlite" if is_sqlite else "postgres")
    assert result["jobs"] == JOBS and result["processes"] == 2
    assert result["durability"] == "full"
    for phase in ("insert", "bulk_insert", "process"):
        assert result["raw"][phase]["per_second"] > 0
    for phase in ("enqueue", "enqueue_many", "process_1", "process_p"):
        assert result["errands"][phase]["per_second"] > 0
    assert result["errands"]["process_1"]["completed"] == JOBS
    assert result["errands"]["process_p"]["completed"] == JOBS
    assert set(result["ratios"]) == {"enqueue", "enqueue_many", "process_1", "process_p"}
    assert all(x > 0 for x in result["ratios"].values())

    pickup = result["pickup"]
    assert pickup["completed"] == pickup["samples"] == 200
    assert pickup["p50_ms"] <= pickup["p95_ms"] <= pickup["p99_ms"] <= pickup["max_ms"]
    assert result["idle"]["seconds"] == 5
    assert result["idle"]["cpu_percent"] is None or result["idle"]["cpu_percent"] >= 0
    assert {"errands", "python", "sqlite"} <= set(result["versions"])

    # The temporary databases are removed afterwards.
    if is_sqlite:
        assert not [p for p in tmp_path.iterdir() if p.name.startswith("errands-bench-")]
    else:
        assert "postgresql" in result["versions"]
        assert bench_schemas(db_url) == []


def test_bench_refuses_a_db_that_is_not_postgresql(tmp_path: Path) -> None:
    r = bench(tmp_path, "--db", str(tmp_path / "app.db"))
    assert r.returncode == 2, r.stderr
    assert "not a postgresql:// URL" in r.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize("option", ["--jobs", "--processes"])
def test_bench_refuses_a_count_below_one(tmp_path: Path, option: str) -> None:
    assert bench(tmp_path, option, "0").returncode == 2
