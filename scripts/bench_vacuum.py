"""A steady load on PostgreSQL with autovacuum off, with errands' vacuum service and without:
pickup lag p50 per 10-second window, and the dead tuples left in ``jobs``.

    python scripts/bench_vacuum.py postgresql://postgres@127.0.0.1:5432/postgres [RATE] [SECONDS]

For each run it creates a database of its own (``errands_bench_vacuum_on`` / ``_off``), sets
``autovacuum_enabled = off`` on errands' tables there (so the result does not depend on the
server's switch, and no other database is touched), starts one ``errands worker`` process, and
enqueues RATE no-op jobs a second one by one for SECONDS. In the "without" run a lease held by
this script keeps any worker from leading the ``vacuum`` service, which is what errands did
before it had one. Pickup lag is ``started_at - run_at`` of the jobs started in each window.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg

import errands
from errands.backends.vacuum import errands_tables

APP = """
import errands

q = errands.Queue()


@q.task()
def noop() -> None:
    return None
"""


def _database(base: str, name: str) -> str:
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    return base.rsplit("/", 1)[0] + "/" + name


def run(base: str, rate: float, seconds: float, vacuum: bool) -> dict[str, object]:
    url = _database(base, "errands_bench_vacuum_" + ("on" if vacuum else "off"))
    q = errands.Queue(url)
    with psycopg.connect(url, autocommit=True) as conn:
        for table in errands_tables("postgres"):
            conn.execute(f'ALTER TABLE "{table}" SET (autovacuum_enabled = off)')
    if not vacuum:  # held for the whole run: no worker leads errands' vacuum
        q.backend.try_lead("vacuum", "bench-without", seconds + 3600, time.time())
    with tempfile.TemporaryDirectory() as here:
        Path(here, "bench_vacuum_app.py").write_text(APP)
        env = {**os.environ, "ERRANDS_DB": url, "PYTHONPATH": here}
        worker = subprocess.Popen(
            [sys.executable, "-m", "errands", "worker", "--app", "bench_vacuum_app:q", "--quiet"],
            cwd=here,
            env=env,
        )
        try:
            time.sleep(3)  # the worker up and listening
            t0 = time.time()
            start = time.monotonic()
            sent = 0
            while (elapsed := time.monotonic() - start) < seconds:
                due = int(elapsed * rate)
                while sent < due and time.monotonic() - start < seconds:
                    q.enqueue("noop", {})
                    sent += 1
                time.sleep(0.002)
            took = time.monotonic() - start
            time.sleep(3)  # the last jobs picked up
        finally:
            worker.terminate()
            worker.wait(30)
    with psycopg.connect(url, autocommit=True) as conn:
        windows = conn.execute(
            "SELECT floor(extract(epoch FROM started_at) - %s)::int / 10 AS w, count(*), "
            "percentile_cont(0.5) WITHIN GROUP "
            "(ORDER BY extract(epoch FROM started_at - run_at)) * 1000 "
            "FROM jobs WHERE started_at IS NOT NULL GROUP BY 1 ORDER BY 1",
            (t0,),
        ).fetchall()
        conn.execute("SELECT pg_stat_force_next_flush()")
        conn.execute("SELECT 1")
        time.sleep(1.5)
        dead, size = conn.execute(
            "SELECT n_dead_tup, pg_total_relation_size(relid) FROM pg_stat_user_tables "
            "WHERE relname = 'jobs'"
        ).fetchone()  # type: ignore[misc]
    q.close()
    p50s = [float(w[2]) for w in windows if w[0] >= 0]
    return {
        "vacuum": vacuum,
        "sent": sent,
        "rate": sent / took,
        "p50_by_window_ms": [round(p, 1) for p in p50s],
        "dead_tuples_jobs": dead,
        "jobs_bytes": size,
    }


def main() -> None:
    base = sys.argv[1] if len(sys.argv) > 1 else "postgresql://postgres@127.0.0.1:5432/postgres"
    rate = float(sys.argv[2]) if len(sys.argv) > 2 else 300.0
    seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 180.0
    for vacuum in (True, False):
        r = run(base, rate, seconds, vacuum)
        p50 = r["p50_by_window_ms"]
        assert isinstance(p50, list)
        print(
            f"errands' vacuum {'on ' if vacuum else 'off'}: {r['sent']} jobs at {r['rate']:.0f}/s "
            f"(asked {rate:.0f}/s for {seconds:.0f}s); pickup p50 per 10 s (ms): {p50}; "
            f"jobs: {r['dead_tuples_jobs']:,} dead tuples, {r['jobs_bytes']:,} bytes",
            flush=True,
        )


if __name__ == "__main__":
    main()
