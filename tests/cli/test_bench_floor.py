"""``scripts/bench_floor.py``, the layer-by-layer breakdown BENCHMARKS.md quotes: it runs every
layer of every phase on a real SQLite file and reports each as a ratio to its raw baseline
measured in the same round. Shape only: figures are recorded, never asserted (noisy hosts)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_floor.py"
LAYERS = {
    "enqueue": ["raw insert", "errands' statements", "… without the event", "Queue.enqueue"],
    "enqueue_many": ["raw bulk insert", "errands' statements", "Queue.enqueue_many"],
    "process": ["raw processing", "backend verbs, batches of 500", "run_worker in process"],
}


@pytest.mark.heavy
def test_every_layer_runs_and_is_a_ratio_to_the_raw_baseline_of_its_round() -> None:
    run = subprocess.run(
        [sys.executable, "-W", "error", str(SCRIPT), "--jobs", "40", "--rounds", "2", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    assert (result["jobs"], result["rounds"], result["durability"]) == (40, 2, "full")
    for phase, layers in LAYERS.items():
        assert list(result[phase]) == layers
        base = result[phase][layers[0]]
        assert base["ratio"] == 1.0
        for name in layers:
            rates = result[phase][name]["per_second"]
            assert len(rates) == 2 and all(r > 0 for r in rates), (phase, name)
            ratios = sorted(r / b for r, b in zip(rates, base["per_second"], strict=True))
            # The median of two paired ratios is their mean (rates are rounded to whole jobs).
            assert abs(result[phase][name]["ratio"] - sum(ratios) / 2) < 0.02, (phase, name)
    assert "round 2/2" in run.stderr
