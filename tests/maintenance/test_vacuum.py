"""Dead tuples, the xmin horizon and errands' own vacuum, on a real PostgreSQL: a second
connection holds a real REPEATABLE READ snapshot and ``check`` names it (pid, age); real
UPDATEs leave real dead tuples that the vacuum service's real VACUUM reclaims — or cannot,
while the snapshot is held, which it remembers instead of vacuuming again for nothing.
SQLite keeps neither dead tuples nor a horizon: the same calls report "not applicable"."""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest

import errands
from errands.backends.base import TableHealth
from errands.horizon import Limits, holder_line, problems
from errands.maintenance.vacuum import Vacuumer
from errands.metrics import render_metrics
from helpers.ops import vacuum_runs
from helpers.support import FixedClock, is_sqlite
from helpers.support import run_cli as run

BATCH = 1500  # jobs; each UPDATE of them all leaves this many dead tuples in jobs


def _postgres(url: str) -> None:
    if is_sqlite(url):
        pytest.skip("PostgreSQL's dead tuples and horizon (SQLite: test_sqlite_has_neither)")


def _enqueue(q: errands.Queue, n: int = BATCH) -> None:
    for i in range(n):
        q.enqueue("t", {"i": i})


def _dead(q: errands.Queue) -> int:
    return next(t.dead_tuples for t in q.backend.table_health() if t.name == "jobs")


def _churn(url: str, q: errands.Queue, times: int = 2) -> int:
    """UPDATE every job ``times`` times (run_at: an indexed column, so no update is HOT and
    every old version waits for VACUUM), then wait until the statistics show them."""
    before = _dead(q)
    with psycopg.connect(url, autocommit=True) as conn:
        for _ in range(times):
            conn.execute("UPDATE jobs SET run_at = run_at + interval '1 millisecond'")
        # The counts reach the shared statistics about a second after a session's
        # transaction (PostgreSQL 15+); ask for it now, then wait for it in any case.
        if conn.info.server_version >= 150000:
            conn.execute("SELECT pg_stat_force_next_flush()")
        conn.execute("SELECT 1")
    deadline = time.monotonic() + 30
    while _dead(q) < before + BATCH * times and time.monotonic() < deadline:
        time.sleep(0.1)
    return _dead(q)


@contextmanager
def held_snapshot(url: str) -> Iterator[int]:
    """A REPEATABLE READ transaction on a connection of its own that has read jobs (so it
    holds a snapshot): the xmin horizon stays where it is until it ends. Yields its pid."""
    conn = psycopg.connect(url, application_name="nightly-report")
    try:
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        conn.execute("SELECT count(*) FROM jobs").fetchone()
        yield conn.info.backend_pid
    finally:
        conn.rollback()
        conn.close()


def _check(tmp_path: Path, url: str, *args: str) -> tuple[int, dict[str, Any], str]:
    r = run(tmp_path, "--db", url, "check", "--max-wait", "1d", "--json", *args)
    return r.returncode, json.loads(r.stdout), r.stderr


def test_check_names_the_transaction_that_holds_the_horizon(
    db_url: str, q: errands.Queue, tmp_path: Path
) -> None:
    _postgres(db_url)
    vacuum_runs(q)  # only the holder is under test here
    with held_snapshot(db_url) as pid:
        code, out, _ = _check(tmp_path, db_url, "--max-horizon-age", "0")
        (line,) = [p for p in out["problems"] if f"pid {pid}" in p]
        assert code == 1
        assert line.startswith(f"transaction pid {pid} (application 'nightly-report', client ")
        assert "has held the xmin horizon for " in line and "query started " in line
        assert f"SELECT pg_terminate_backend({pid})" in line
        # Under the default limit (five minutes) a fresh transaction is no problem.
        assert not any(f"pid {pid}" in p for p in _check(tmp_path, db_url)[1]["problems"])
        stats = json.loads(run(tmp_path, "--db", db_url, "stats", "--json").stdout)["vacuum"]
        held = [h for h in stats["horizon"]["held_by"] if h["pid"] == pid]
        assert held and held[0]["kind"] == "transaction" and held[0]["age_seconds"] >= 0
        assert held[0]["application_name"] == "nightly-report"
        assert stats["horizon"]["age_seconds"] is not None
        text = run(tmp_path, "--db", db_url, "stats").stdout
        assert "horizon   " in text and f"pid {pid}" in text
    code, out, _ = _check(tmp_path, db_url, "--max-horizon-age", "0")
    assert not any(f"pid {pid}" in p for p in out["problems"])


def test_the_dashboard_overview_shows_a_long_held_horizon(
    db_url: str, make_queue: Callable[..., errands.Queue]
) -> None:
    from starlette.testclient import TestClient

    from errands.web import create_app

    # Seen ten minutes on (the Queue's clock): past the five minutes check allows by default.
    later = make_queue(clock=FixedClock(time.time() + 600))
    page = TestClient(create_app(later)).get("/").text
    assert 'id="horizon-held"' not in page
    if is_sqlite(db_url):
        return  # no horizon: never the line
    with held_snapshot(db_url) as pid:
        page = TestClient(create_app(later)).get("/").text
    (line,) = re.findall(r'<p class="alert" id="horizon-held">([^<]*)</p>', page)
    assert f"transaction pid {pid}" in line  # opened just after that clock was set: ~10 min
    assert re.search(r"has held the xmin horizon for (9|10)m\d\ds", line)


def test_check_reports_autovacuum_off_unless_errands_vacuum_runs(
    db_url: str, q: errands.Queue, tmp_path: Path
) -> None:
    _postgres(db_url)
    with psycopg.connect(db_url, autocommit=True) as conn:
        server = conn.execute("SHOW autovacuum").fetchone()[0]  # type: ignore[index]
        # Off for jobs whatever the server says (CI's server has it off everywhere).
        conn.execute("ALTER TABLE jobs SET (autovacuum_enabled = off)")
    off = json.loads(run(tmp_path, "--db", db_url, "stats", "--json").stdout)["vacuum"]
    assert "jobs" in off["autovacuum_off"]
    assert ("job_attempts" in off["autovacuum_off"]) == (server == "off")
    code, out, _ = _check(tmp_path, db_url)
    (line,) = [p for p in out["problems"] if p.startswith("autovacuum is off")]
    assert code == 1 and "no worker runs errands' own vacuum" in line and "jobs" in line
    vacuum_runs(q, "w-1")  # a live worker leads the vacuum service: reported, not a failure
    code, out, _ = _check(tmp_path, db_url)
    assert code == 0 and out["problems"] == []
    assert any("errands' own vacuum (worker w-1)" in w for w in out["warnings"])


def test_check_fails_when_dead_tuples_pile_up(
    db_url: str, q: errands.Queue, tmp_path: Path
) -> None:
    _postgres(db_url)
    vacuum_runs(q)
    _enqueue(q)
    dead = _churn(db_url, q)
    assert dead >= 2 * BATCH
    code, out, _ = _check(tmp_path, db_url, "--max-dead-tuples", "1000")
    (line,) = [p for p in out["problems"] if "dead tuples past --max-dead-tuples 1,000" in p]
    assert code == 1 and f"jobs {dead:,}" in line
    assert not any("dead tuples" in p for p in _check(tmp_path, db_url)[1]["problems"])
    metrics = render_metrics(q).decode()
    assert f'errands_postgres_dead_tuples{{table="jobs"}} {float(dead)}' in metrics
    assert "errands_postgres_xmin_horizon_age_seconds" in metrics
    assert "errands_postgres_xmin_horizon_xids" in metrics
    assert 'errands_postgres_autovacuum_enabled{table="jobs"}' in metrics


def test_the_vacuum_service_reclaims_dead_tuples(
    db_url: str, q: errands.Queue, caplog: pytest.LogCaptureFixture
) -> None:
    _postgres(db_url)
    _enqueue(q)
    before = _churn(db_url, q)
    service = Vacuumer(q.backend)
    with caplog.at_level(logging.INFO, logger="errands.maintenance"):
        assert "jobs" in (service.run_once(time.time()) or [])
        service.wait()
    (logged,) = [r for r in caplog.records if r.getMessage().startswith("vacuumed jobs: ")]
    assert f"{before:,} dead tuples before, " in logged.getMessage()
    assert logged.errands["event"] == "vacuumed"  # type: ignore[attr-defined]
    jobs = next(t for t in q.backend.table_health() if t.name == "jobs")
    assert jobs.dead_tuples < before and jobs.dead_tuples < service.min_dead
    assert jobs.last_vacuum_at is not None
    assert service.run_once(time.time()) is None  # nothing left to do


def test_under_a_held_horizon_the_service_waits_for_new_dead_tuples(
    db_url: str, q: errands.Queue
) -> None:
    _postgres(db_url)
    _enqueue(q)
    service = Vacuumer(q.backend)
    with held_snapshot(db_url):
        before = _churn(db_url, q)
        assert "jobs" in (service.run_once(time.time()) or [])
        service.wait()
        assert _dead(q) >= 2 * BATCH  # the snapshot still sees them: nothing reclaimed
        assert service.left["jobs"] >= 2 * BATCH
        # The same dead tuples again: no second VACUUM for nothing.
        assert "jobs" not in (service.run_once(time.time()) or [])
        service.wait()
    # Released: new dead tuples past the threshold bring the table back, and all go.
    assert before >= 2 * BATCH
    _churn(db_url, q, times=1)
    assert "jobs" in (service.run_once(time.time()) or [])
    service.wait()
    assert _dead(q) < service.min_dead


def test_sqlite_has_neither(db_url: str, q: errands.Queue, tmp_path: Path) -> None:
    if not is_sqlite(db_url):
        pytest.skip("SQLite's side (PostgreSQL: the tests above)")
    assert q.backend.table_health() == [] and q.backend.horizon_holders() == []
    assert Vacuumer(q.backend).run_once(time.time()) is None
    assert q.stats()["vacuum"] == {"applicable": False, "warning": None}
    text = run(tmp_path, "--db", db_url, "stats").stdout
    assert "horizon" not in text and "vacuum    " not in text
    assert "errands_postgres" not in render_metrics(q).decode()


def _table(**kw: Any) -> TableHealth:
    base: dict[str, Any] = {
        "name": "jobs",
        "live_tuples": 10_000,
        "dead_tuples": 5_000,
        "last_vacuum_at": None,
        "last_autovacuum_at": None,
        "autovacuum_on": False,
        "bytes": 0,
    }
    return TableHealth(**{**base, **kw})


def test_the_service_leaves_a_table_to_an_autovacuum_that_keeps_up(
    db_url: str, q: errands.Queue
) -> None:
    service, now = Vacuumer(q.backend), 1_000_000.0
    assert service.due(_table(), now)  # autovacuum off: errands' vacuum
    assert not service.due(_table(dead_tuples=1000), now)  # under 1000 + 5% of 10,000
    recent = _table(autovacuum_on=True, last_autovacuum_at=now - 10)
    assert not service.due(recent, now)  # autovacuum ran 10 s ago: it keeps up
    assert service.due(_table(autovacuum_on=True, last_autovacuum_at=now - 600), now)  # lagging


def test_each_kind_of_holder_is_named_with_its_way_out() -> None:
    base: dict[str, Any] = {
        "pid": None,
        "application_name": None,
        "client_addr": None,
        "age_seconds": None,
        "started_at": None,
        "query_start": None,
        "state": None,
        "query": None,
        "xid_age": 2_000_000,
    }
    slot = {**base, "kind": "replication slot", "name": "lagging_replica", "state": "inactive"}
    prepared = {**base, "kind": "prepared transaction", "name": "tx-1", "age_seconds": 900.0}
    figures = {
        "applicable": True,
        "tables": [],
        "autovacuum_off": [],
        "errands_vacuum": None,
        "horizon": {"held_by": [slot, prepared]},
    }
    lines = problems(figures, Limits())
    assert "replication slot 'lagging_replica' has held the xmin horizon 2,000,000" in lines[0]
    assert "SELECT pg_drop_replication_slot('lagging_replica')" in lines[0]
    assert "prepared transaction 'tx-1' has held the xmin horizon for 15m00s" in lines[1]
    assert "ROLLBACK PREPARED 'tx-1'" in lines[1]
    assert holder_line({**base, "kind": "standby feedback", "name": None, "pid": 7}).startswith(
        "standby feedback pid 7 has held"
    )


def test_the_hot_tables_carry_their_own_vacuum_settings(db_url: str, q: errands.Queue) -> None:
    _postgres(db_url)
    with psycopg.connect(db_url) as conn:
        rows: dict[str, list[str]] = dict(
            conn.execute(
                "SELECT relname, reloptions FROM pg_class WHERE relname = ANY(%s)",
                (["jobs", "job_attempts", "workers", "job_counts"],),
            ).fetchall()
        )
    assert {"fillfactor=90", "autovacuum_vacuum_scale_factor=0.01"} <= set(rows["jobs"])
    assert "autovacuum_vacuum_threshold=1000" in rows["job_attempts"]
    for tiny in ("workers", "job_counts"):
        assert {"fillfactor=50", "autovacuum_vacuum_scale_factor=0"} <= set(rows[tiny])
