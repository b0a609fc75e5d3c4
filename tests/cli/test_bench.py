"""The CI smoke test of ``errands bench``: it runs every phase end to end on each backend, in
two rounds, reports every figure in the documented shape (the headline ratios are the median
of the rounds' paired ratios, recomputed here from the reported rounds), and every job of
every phase completes. ``scripts/bench.py`` renders a record from such a result.

No figure is compared with a threshold: the machines running tests are shared and noisy.
Performance is recorded in BENCHMARKS.md, not asserted.
"""

from __future__ import annotations

import importlib.util
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import psycopg
import pytest

ROOT = Path(__file__).resolve().parents[2]
JOBS = 400  # x ROUNDS: every phase end to end; sizes are the benchmark's, not this smoke test's
ROUNDS = 2
IDLE_SECONDS = 2
# Each errands phase and the raw baseline measured right before it in the same round.
BASELINES = {
    "enqueue": "insert",
    "enqueue_async": "insert",
    "enqueue_threads": "insert",
    "enqueue_tasks": "insert",
    "enqueue_many": "bulk_insert",
    "process_1": "process",
    "process_p": "process_p",  # like with like: raw processing by as many processes
}


def bench(
    tmp_path: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    env = {**{k: v for k, v in os.environ.items() if k != "ERRANDS_DB"}, **(env or {})}
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


@pytest.mark.heavy
def test_bench_json_reports_every_phase_and_completes_every_job(
    db_url: str, is_sqlite: bool, tmp_path: Path
) -> None:
    where = ["--dir", str(tmp_path)] if is_sqlite else ["--db", db_url]
    r = bench(
        tmp_path,
        *("--jobs", str(JOBS), "--rounds", str(ROUNDS), "--idle-seconds", str(IDLE_SECONDS)),
        *("--json", *where),
        # ignored, as --help says: the bench's workers must not check it against its app
        env={"ERRANDS_DB": str(tmp_path / "the-users-own.db")},
    )
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    # Progress went to stderr, phase by phase and round by round.
    assert "[errands bench] round 2/2: raw insert" in r.stderr
    assert "[errands bench] pickup p50" in r.stderr
    assert "[errands bench] round 2/2: enqueue, 8 threads" in r.stderr
    assert "[errands bench] round 2/2: enqueue_async, 64 tasks" in r.stderr

    assert result["backend"] == ("sqlite" if is_sqlite else "postgres")
    assert result["jobs"] == JOBS and result["processes"] == 2
    assert result["rounds"] == ROUNDS
    assert result["durability"] == "full"
    for phase in ("insert_audited", "insert", "bulk_insert", "process", "process_p"):
        assert_best_of_rounds(result["raw"][phase])
    for phase in BASELINES:
        assert_best_of_rounds(result["errands"][phase])
    assert_producer_phases(result)
    assert result["errands"]["process_1"]["completed"] == JOBS
    assert result["errands"]["process_p"]["completed"] == JOBS
    assert_ratios_are_paired(result)
    assert_scaling_is_paired(result)
    # enqueue one by one over the raw insert that writes its audit row too, paired the same way
    pairs = zip(
        result["errands"]["enqueue"]["rounds"],
        result["raw"]["insert_audited"]["rounds"],
        strict=True,
    )
    audited = round(statistics.median(m / b for m, b in pairs), 3)
    assert result["ratios_audited"] == {"enqueue": audited}

    pickup = result["pickup"]
    assert pickup["completed"] == pickup["samples"] == 200
    assert pickup["p50_ms"] <= pickup["p95_ms"] <= pickup["p99_ms"] <= pickup["max_ms"]
    assert result["idle"]["seconds"] == IDLE_SECONDS
    assert result["idle"]["cpu_percent"] is None or result["idle"]["cpu_percent"] >= 0
    assert {"errands", "python", "sqlite"} <= set(result["versions"])

    # The temporary databases are removed afterwards.
    if is_sqlite:
        assert not [p for p in tmp_path.iterdir() if p.name.startswith("errands-bench-")]
    else:
        assert "postgresql" in result["versions"]
        assert bench_schemas(db_url) == []
    # The record scripts/bench.py appends to BENCHMARKS.md reads this very shape.
    record = bench_script().record(result)
    assert f"ratio: median of {ROUNDS} paired rounds" in record
    assert "| `enqueue`, 8 threads / raw insert |" in record
    assert "8 threads / 1 thread **" in record
    assert "| `enqueue` one by one / raw insert + its audit row, 1 tx per job |" in record


def assert_best_of_rounds(phase: dict[str, Any]) -> None:
    """``per_second`` is the best of the rounds, listed in run order."""
    assert len(phase["rounds"]) == ROUNDS
    assert all(x > 0 for x in phase["rounds"])
    assert phase["per_second"] == max(phase["rounds"])
    assert phase["seconds"] > 0


def assert_producer_phases(result: dict[str, Any]) -> None:
    """Each producer phase has its latency per call; the many-producer phases their paired
    ratios to the one-producer phase of their kind (no figure judged: shapes only)."""
    ours = result["errands"]
    for phase in ("enqueue", "enqueue_async", "enqueue_threads", "enqueue_tasks"):
        assert 0 < ours[phase]["p50_ms"] <= ours[phase]["p99_ms"], phase
        assert len(ours[phase]["p99_rounds"]) == ROUNDS
    many = {"enqueue_threads": "enqueue", "enqueue_tasks": "enqueue_async"}
    assert set(result["producers"]) == set(many)
    for phase, one in many.items():
        speed = [m / o for m, o in zip(ours[phase]["rounds"], ours[one]["rounds"], strict=True)]
        p99 = [
            m / o for m, o in zip(ours[phase]["p99_rounds"], ours[one]["p99_rounds"], strict=True)
        ]
        assert result["producers"][phase] == {
            "speedup": round(statistics.median(speed), 3),
            "p99_ratio": round(statistics.median(p99), 3),
        }


def assert_ratios_are_paired(result: dict[str, Any]) -> None:
    """``ratios``: the median of errands / raw within each round; ``ratios_best``: best / best."""
    raw, ours = result["raw"], result["errands"]
    assert set(result["ratios"]) == set(result["ratios_best"]) == set(BASELINES)
    for phase, base in BASELINES.items():
        pairs = [m / b for m, b in zip(ours[phase]["rounds"], raw[base]["rounds"], strict=True)]
        assert result["ratios"][phase] == round(statistics.median(pairs), 3), phase
        best = ours[phase]["per_second"] / raw[base]["per_second"]
        assert result["ratios_best"][phase] == round(best, 3), phase


def assert_scaling_is_paired(result: dict[str, Any]) -> None:
    """``scaling``: P processes / 1, errands and raw, each the median of in-round pairs."""
    raw, ours = result["raw"], result["errands"]
    for side, figures, p, one in (
        ("errands", ours, "process_p", "process_1"),
        ("raw", raw, "process_p", "process"),
    ):
        pairs = [a / b for a, b in zip(figures[p]["rounds"], figures[one]["rounds"], strict=True)]
        assert result["scaling"][side] == round(statistics.median(pairs), 3), side


def bench_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_script", ROOT / "scripts" / "bench.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def canned_result() -> dict[str, Any]:
    def phase(*rounds: float, completed: int | None = None) -> dict[str, Any]:
        best = {"seconds": round(3000 / max(rounds), 4), "per_second": max(rounds)}
        extra = {} if completed is None else {"completed": completed}
        return {**best, **extra, "rounds": list(rounds)}

    def producer(*rounds: float, p99: float) -> dict[str, Any]:
        return {**phase(*rounds), "p50_ms": p99 / 4, "p99_ms": p99, "p99_rounds": [p99] * 3}

    return {
        "backend": "sqlite",
        "jobs": 3000,
        "rounds": 3,
        "processes": 2,
        "concurrency": 8,
        "durability": "full",
        "filesystem": "ext4",
        "cpus": 2,
        "load_average": [1.0, 1.0, 1.0],
        "raw": {
            "insert_audited": phase(4000.0, 2000.0, 3000.0),
            "insert": phase(5000.0, 2500.0, 4000.0),
            "bulk_insert": phase(300000.0, 250000.0, 200000.0),
            "process": phase(40000.0, 20000.0, 30000.0),
            "process_p": phase(36000.0, 18000.0, 30000.0),
        },
        "errands": {
            "enqueue": producer(3500.0, 2000.0, 2400.0, p99=4.0),
            "enqueue_async": producer(3000.0, 2000.0, 2400.0, p99=5.0),
            "enqueue_threads": producer(14000.0, 9000.0, 9600.0, p99=6.0),
            "enqueue_tasks": producer(15000.0, 10000.0, 12000.0, p99=7.0),
            "enqueue_many": phase(75000.0, 50000.0, 60000.0),
            "process_1": phase(30000.0, 16000.0, 27000.0, completed=3000),
            "process_p": phase(28000.0, 15000.0, 24000.0, completed=3000),
        },
        "ratios": {
            "enqueue": 0.7,
            "enqueue_async": 0.6,
            "enqueue_threads": 2.8,
            "enqueue_tasks": 3.0,
            "enqueue_many": 0.25,
            "process_1": 0.8,
            "process_p": 0.75,
        },
        "ratios_best": {
            "enqueue": 0.7,
            "enqueue_async": 0.6,
            "enqueue_threads": 2.8,
            "enqueue_tasks": 3.0,
            "enqueue_many": 0.25,
            "process_1": 0.75,
            "process_p": 0.78,
        },
        "ratios_audited": {"enqueue": 0.875},
        "producers": {
            "enqueue_threads": {"speedup": 4.0, "p99_ratio": 1.5},
            "enqueue_tasks": {"speedup": 5.0, "p99_ratio": 1.4},
        },
        "scaling": {"errands": 0.9, "raw": 0.9},
        "pickup": {
            "samples": 200,
            "completed": 200,
            "p50_ms": 1.0,
            "p95_ms": 2.0,
            "p99_ms": 3.0,
            "max_ms": 4.0,
        },
        "idle": {"seconds": 5.0, "cpu_percent": 0.2},
        "versions": {"errands": "0.1.0", "python": "3.11.7", "sqlite": "3.40.1"},
    }


def test_the_benchmarks_record_shows_the_rounds_and_how_the_ratio_is_taken() -> None:
    text = bench_script().record(canned_result())
    assert "3000 jobs x 3 rounds" in text
    assert "ratio: median of 3 paired rounds" in text
    rows = [
        line
        for line in text.splitlines()
        if line.startswith("| `enqueue` one by one / raw insert,")
    ]
    # best errands, its spread, best raw, its spread, the median ratio, best / best
    assert rows == [
        "| `enqueue` one by one / raw insert, 1 tx per row | 3,500 | 2,000-3,500 | 5,000 | "
        "2,500-5,000 | **0.70x** | 0.70x |"
    ]
    assert "2,000-3,500" in text and "15,000-28,000" in text
    (row,) = [line for line in text.splitlines() if "raw insert + its audit row" in line]
    assert row.endswith("| 3,500 | 2,000-3,500 | 4,000 | 2,000-4,000 | **0.88x** | 0.88x |")
    # the P-process row is divided by raw processing by as many processes, not by one
    (row,) = [line for line in text.splitlines() if line.startswith("| processing, 2 ")]
    assert "by 2 processes | 28,000 | 15,000-28,000 | 36,000 | 18,000-36,000 |" in row
    assert "Scaling, 2 processes / 1 (median of paired rounds): errands 0.90x, raw 0.90x" in text


def test_bench_refuses_a_db_that_is_not_postgresql(tmp_path: Path) -> None:
    r = bench(tmp_path, "--db", str(tmp_path / "app.db"))
    assert r.returncode == 2, r.stderr
    assert "not a postgresql:// URL" in r.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize("option", ["--jobs", "--processes", "--rounds"])
def test_bench_refuses_a_count_below_one(tmp_path: Path, option: str) -> None:
    assert bench(tmp_path, option, "0").returncode == 2


def test_bench_says_how_many_rounds_it_takes(tmp_path: Path) -> None:
    r = bench(tmp_path, "--rounds", "0")
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert "--rounds" in last and "between 1 and 100" in last and "got 0" in last, last


def test_the_report_shows_best_spread_and_median_ratio_within_100_columns(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from errands.cli.bench.reporting import report

    report(canned_result())
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 100
    row = next(line for line in out.splitlines() if line.startswith("enqueue one by one"))
    # best errands jobs/s, its rounds' spread, best raw jobs/s, its spread, the median ratio
    figures = row.removeprefix("enqueue one by one").split()
    assert figures == ["3,500", "2,000-3,500", "5,000", "2,500-5,000", "0.70x"]
    flat = " ".join(out.split())
    assert "the best of 3 rounds" in flat and "median over rounds" in flat
    # the P-process row compares like with like: raw processing by as many processes
    row = next(line for line in out.splitlines() if line.startswith("process, 2 worker"))
    assert row.split()[-4:] == ["15,000-28,000", "36,000", "18,000-36,000", "0.75x"]
    assert "RATIO: errands / raw doing the same work with as many processes" in flat
    assert "SCALING, 2 processes / 1: errands 0.90x, raw 0.90x" in flat
    threads = next(line for line in out.splitlines() if line.startswith("enqueue, 8 threads"))
    assert threads.split()[3:] == ["14,000", "9,000-14,000", "5,000", "2,500-5,000", "2.80x"]
    assert "enqueue, 8 threads: p50 1.5 ms, p99 6.0 ms" in flat
    assert "enqueue, 8 threads / enqueue one by one: 4.00x jobs/s, 1.50x p99" in flat


@pytest.mark.heavy
@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_bench_steps_measures_every_variant_and_completes_every_job(
    backend: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from errands.cli.bench.steps import measure_steps, report_steps

    url = None
    if backend == "postgres":
        url = os.environ.get("ERRANDS_TEST_POSTGRES_URL")
        if not url:
            pytest.skip("set ERRANDS_TEST_POSTGRES_URL")
    r = measure_steps(
        url=url, jobs=30, rounds=1, concurrency=4, durability="full", directory=None, parked=40
    )
    assert set(r["rounds"]) == {"plain", "three_steps", "beside_parked"}
    assert all(len(v) == 1 and v[0] > 0 for v in r["rounds"].values())
    assert r["parked"] == 40 and r["three_steps_vs_plain"] > 0 and r["beside_parked_vs_plain"] > 0
    report_steps(r)
    out = capsys.readouterr().out
    assert "jobs recording three no-op steps" in out and "beside 40 parked ones" in out
