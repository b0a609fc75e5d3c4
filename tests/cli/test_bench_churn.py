"""``errands bench --long-transaction`` end to end on a real PostgreSQL, briefly: every phase
is reported in the documented shape with its samples, and the SQLite default is refused with
what to do. No figure is
compared with a threshold: the machines running tests are shared and noisy."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

PG = os.environ.get("ERRANDS_TEST_POSTGRES_URL")


def bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "errands", "bench", "--long-transaction", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_without_postgres_it_says_to_give_one() -> None:
    out = bench("--phase", "1s", "--hold", "1s")
    assert out.returncode == 2
    assert "--db postgresql://" in out.stderr


@pytest.mark.skipif(not PG, reason="needs ERRANDS_TEST_POSTGRES_URL")
def test_phases_samples_and_table_figures() -> None:
    assert PG
    out = bench(
        "--db", PG, "--jobs", "300", "--rate", "100", "--phase", "2s", "--hold", "3s",
        "--sample", "1s", "--json",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["offered_per_second"] == 100
    assert result["autovacuum"] in ("on", "off")
    assert list(result["phases"]) == ["normal", "held", "released"]
    for name, seconds in (("normal", 2), ("held", 3), ("released", 2)):
        phase = result["phases"][name]
        assert len(phase["samples"]) == seconds
        assert phase["finished_per_second"] > 0
        assert phase["pickup_p50_ms"] is not None
        assert phase["pickup_p99_ms"] >= phase["pickup_p50_ms"]
        assert phase["table_mb"] > 0 and phase["indexes_mb"] > 0
        # per index read in the phase (the server's statistics may lag a short phase)
        for reads in phase["index_reads"].values():
            assert set(reads) == {"scans_per_second", "entries_per_second", "entries_per_scan"}
        for s in phase["samples"]:
            assert {"enqueued_per_second", "dead_tuples", "grew_mb"} - set(s) == {"grew_mb"}
