"""Retention: what prune keeps and deletes, cascades, batch size, rollups, reruns."""

from __future__ import annotations

import json
import os
import threading
from typing import Any

import pytest

import errands
from errands.backends.base import ClaimRequest, NewJob, PruneProgress, Succeeded
from errands.core import rollup
from errands.maintenance.pruner import BUSY_INTERVAL, IDLE_INTERVAL, Pruner
from errands.maintenance.runner import Maintenance
from helpers.ops import DAY, enqueue, run_job
from helpers.support import EPOCH, FixedClock, is_postgres, sql_rows, sqlite_only

RETENTION = {"succeeded": 1 * DAY, "failed": 3 * DAY, "cancelled": 2 * DAY}


@pytest.fixture
def rq(db_url: str, clock: FixedClock) -> Any:
    with errands.Queue(db_url, clock=clock, retention=RETENTION) as queue:
        yield queue


def _sql(q: errands.Queue, query: str) -> list[Any]:
    return sql_rows(q.url, query)


def _build(q: errands.Queue, n_old_ok: int = 5) -> dict[str, list[int]]:
    """Old and recent jobs in every state; returns ids by what prune must do."""
    gone: list[int] = []
    kept: list[int] = []
    for i in range(n_old_ok):  # succeeded 2 days ago: past 1 day
        t = EPOCH - 2 * DAY + i * 60
        gone.append(run_job(q, f"ok{i % 2}", run_at=t, started=t + 1, finished=t + 3))
    t = EPOCH - 12 * 3600  # succeeded 12 h ago: kept
    kept.append(run_job(q, "ok0", run_at=t, started=t + 1, finished=t + 2))
    t = EPOCH - 2 * DAY  # failed 2 days ago: kept (3 days)
    kept.append(run_job(q, "bad", run_at=t, started=t, finished=t + 1, outcome="failed"))
    t = EPOCH - 4 * DAY  # failed 4 days ago, after a retry: gone
    gone.append(
        run_job(
            q, "bad", run_at=t, started=t + 5, finished=t + 9, outcome="failed", failures_first=1
        )
    )
    c = enqueue(q, "never", at=EPOCH - 3 * DAY)
    assert q.backend.cancel([c], "api", EPOCH - 3 * DAY + 1).cancelled == [c]
    gone.append(c)  # cancelled 3 days ago: past 2 days
    kept.append(
        enqueue(q, "later", at=EPOCH - 30 * DAY, run_at=EPOCH + DAY)
    )  # queued: never pruned
    return {"gone": gone, "kept": kept}


def test_prune_keeps_what_it_should_and_cascades(rq: errands.Queue) -> None:
    ids = _build(rq)
    before_attempts = _sql(rq, "SELECT COUNT(*) FROM job_attempts")[0][0]
    report = rq.prune()
    assert report.deleted == {"succeeded": 5, "failed": 1, "cancelled": 1}
    assert not report.dry_run and not report.interrupted
    for job_id in ids["gone"]:
        assert rq.get(job_id) is None
    for job_id in ids["kept"]:
        assert rq.get(job_id) is not None
    gone = ",".join(map(str, ids["gone"]))
    for table in ("job_attempts", "job_events", "job_blobs"):
        assert _sql(rq, f"SELECT COUNT(*) FROM {table} WHERE job_id IN ({gone})") == [(0,)]
    # the kept jobs keep their history
    assert _sql(rq, "SELECT COUNT(*) FROM job_attempts")[0][0] == before_attempts - 7
    if not is_postgres(rq.url):  # PostgreSQL enforces foreign keys always; SQLite per connection
        assert _sql(rq, "PRAGMA foreign_key_check") == []


def test_dry_run_counts_and_deletes_nothing(rq: errands.Queue) -> None:
    _build(rq)
    report = rq.prune(dry_run=True)
    assert report.dry_run and report.deleted == {"succeeded": 5, "failed": 1, "cancelled": 1}
    assert _sql(rq, "SELECT COUNT(*) FROM jobs")[0][0] == 10
    assert _sql(rq, "SELECT COUNT(*) FROM job_stats_hourly") == [(0,)]


def test_batch_size_bounds_each_transaction(rq: errands.Queue) -> None:
    _build(rq, n_old_ok=7)
    seen: list[PruneProgress] = []
    report = rq.prune(batch_size=2, progress=seen.append)
    assert report.deleted["succeeded"] == 7
    # 7 succeeded in batches of 2 → 4 batches; 1 failed, 1 cancelled → 1 each
    assert report.batches == 6
    steps = [p.deleted for p in seen if p.state == "succeeded"]
    assert steps == [2, 4, 6, 7]
    assert [p.total_deleted for p in seen] == [2, 4, 6, 7, 8, 9]


def test_rollup_totals_equal_pruned_rows(rq: errands.Queue) -> None:
    _build(rq)
    # The expected figures from the rows themselves, before they are pruned.
    sums: dict[tuple[str, str, str], list[float]] = {}
    for job in rq.jobs(status="succeeded", limit=1000):
        assert job.run_at and job.started_at and job.finished_at
        if job.finished_at.timestamp() < EPOCH - DAY:
            acc = sums.setdefault((job.queue, job.type, job.status), [0, 0.0, 0.0])
            acc[0] += 1
            acc[1] += (job.started_at - job.run_at).total_seconds()
            acc[2] += (job.finished_at - job.started_at).total_seconds()
    expected = [
        (*key, int(n), w, r) for key, (n, w, r) in sorted(sums.items(), key=lambda i: i[0][1])
    ]
    report = rq.prune()
    rows = _sql(
        rq,
        "SELECT queue, type, outcome, SUM(count), SUM(wait_sum), SUM(run_sum) FROM job_stats_hourly"
        " GROUP BY queue, type, outcome ORDER BY outcome, type",
    )
    assert sum(r[3] for r in rows) == report.total == 7
    succeeded = [r for r in rows if r[2] == "succeeded"]
    assert [(r[0], r[1], r[2], r[3]) for r in succeeded] == [e[:4] for e in expected]
    for got, want in zip(succeeded, expected, strict=True):
        assert got[4] == pytest.approx(want[4]) and got[5] == pytest.approx(want[5])
    # the cancelled one never started: counted, no durations
    cancelled = [r for r in rows if r[2] == "cancelled"]
    assert cancelled == [("default", "never", "cancelled", 1, 0.0, 0.0)]
    # histograms hold every started job once, in the hour it finished
    hists = _sql(rq, "SELECT hour, count, wait_hist, run_hist, outcome FROM job_stats_hourly")
    for hour, count, wait_hist, run_hist, outcome in hists:
        assert hour % 3600 == 0
        if outcome != "cancelled":
            assert sum(json.loads(wait_hist)) == count == sum(json.loads(run_hist))
            assert len(json.loads(run_hist)) == len(rollup.BOUNDS) + 1


def test_rerun_is_idempotent(rq: errands.Queue) -> None:
    _build(rq)
    rq.prune()
    snapshot = _sql(rq, "SELECT * FROM job_stats_hourly ORDER BY hour, queue, type, outcome")
    again = rq.prune()
    assert again.total == 0 and again.batches == 0
    assert (
        _sql(rq, "SELECT * FROM job_stats_hourly ORDER BY hour, queue, type, outcome") == snapshot
    )


def pruner(q: errands.Queue, **kwargs: Any) -> Pruner:
    return Pruner(q.backend, q.settings.retention, **kwargs)


def rolled_up(q: errands.Queue) -> int:
    return int(_sql(q, "SELECT COALESCE(SUM(count), 0) FROM job_stats_hourly")[0][0])


def test_interrupted_prune_resumes_without_double_counting(rq: errands.Queue) -> None:
    _build(rq, n_old_ok=6)
    stop = threading.Event()
    first = pruner(rq, batch_size=2, progress=lambda p: stop.set(), should_stop=stop.is_set)
    report = first.run_once(EPOCH)
    assert report.interrupted and report.total == 2 and first.interval == BUSY_INTERVAL
    stop.clear()
    second = pruner(rq, batch_size=2).run_once(EPOCH)
    assert not second.interrupted
    assert report.total + second.total == 8
    assert rolled_up(rq) == 8


def test_pruner_paces_its_passes_with_max_batches(rq: errands.Queue) -> None:
    # 7 succeeded, 1 failed, 1 cancelled past retention; passes of at most 2 batches of 2.
    _build(rq, n_old_ok=7)
    service = pruner(rq, batch_size=2, max_batches=2)
    assert service.interval == IDLE_INTERVAL
    steps = []
    for _ in range(4):
        report = service.run_once(EPOCH)
        # each batch is rolled up in the transaction that deletes it: never ahead, never behind
        steps.append((report.deleted, report.batches, report.more, service.interval))
        assert rolled_up(rq) == sum(sum(d.values()) for d, *_ in steps)
    assert steps == [
        ({"succeeded": 4}, 2, True, BUSY_INTERVAL),
        ({"succeeded": 3, "failed": 0}, 2, True, BUSY_INTERVAL),
        ({"succeeded": 0, "failed": 1, "cancelled": 1}, 2, False, IDLE_INTERVAL),
        ({"succeeded": 0, "failed": 0, "cancelled": 0}, 0, False, IDLE_INTERVAL),
    ]
    assert _sql(rq, "SELECT COUNT(*) FROM jobs")[0][0] == 3  # the kept ones


def test_maintenance_comes_back_soon_while_the_pruner_is_behind(rq: errands.Queue) -> None:
    _build(rq, n_old_ok=7)
    service = pruner(rq, batch_size=2, max_batches=2)
    leader = Maintenance(rq.backend, "host:1:a", [service], ttl=60)
    assert leader.tick(EPOCH) == EPOCH + BUSY_INTERVAL  # a bounded pass ran, rows are left
    assert leader.reports["prune"].total == 4
    assert leader.tick(EPOCH + BUSY_INTERVAL / 2) == EPOCH + BUSY_INTERVAL  # not due: nothing ran
    assert leader.reports["prune"].total == 4
    assert leader.tick(EPOCH + BUSY_INTERVAL) == EPOCH + 2 * BUSY_INTERVAL  # still behind
    # the last rows go: the pruner is idle again, so the next call is for the leader lease
    assert leader.tick(EPOCH + 2 * BUSY_INTERVAL) > EPOCH + 3 * BUSY_INTERVAL
    assert rolled_up(rq) == 9 and service.interval == IDLE_INTERVAL


def test_checkpoint_counts_rows_across_passes(rq: errands.Queue) -> None:
    _build(rq, n_old_ok=7)
    service = pruner(rq, batch_size=2, max_batches=2, checkpoint_after=5)
    first, second, third = (service.run_once(EPOCH) for _ in range(3))
    assert (first.total, second.total, third.total) == (4, 3, 2)
    assert (first.checkpointed, second.checkpointed, third.checkpointed) == (False, True, False)


def test_rollup_merges_into_an_existing_hour(db_url: str, clock: FixedClock) -> None:
    with errands.Queue(db_url, clock=clock, retention={"succeeded": DAY}) as q:
        t = EPOCH - 2 * DAY
        run_job(q, "a", run_at=t, started=t + 1, finished=t + 2)
        q.prune(now=EPOCH)
        run_job(q, "a", run_at=t, started=t + 10, finished=t + 30)
        q.prune(now=EPOCH)
        ((count, wait_sum, wait_max, run_sum, run_max),) = _sql(
            q, "SELECT count, wait_sum, wait_max, run_sum, run_max FROM job_stats_hourly"
        )
        assert (count, wait_sum, wait_max, run_sum, run_max) == (2, 11.0, 10.0, 21.0, 20.0)


def test_large_prune_reports_its_checkpoint(rq: errands.Queue) -> None:
    # The checkpoint step runs on every backend (PostgreSQL's is a no-op query).
    _build(rq)
    assert pruner(rq, checkpoint_after=3).run_once(EPOCH).checkpointed
    assert not pruner(rq, checkpoint_after=3).run_once(EPOCH).checkpointed


def test_large_prune_truncates_the_sqlite_wal(rq: errands.Queue) -> None:
    sqlite_only(rq.url, "the WAL file beside the database; PostgreSQL checkpoints by itself")
    _build(rq)
    report = pruner(rq, checkpoint_after=3).run_once(EPOCH)
    assert report.checkpointed
    assert os.path.getsize(rq.url + "-wal") == 0
    assert rq.backend.storage()["wal_bytes"] == 0


def test_postgres_has_no_wal_figure(rq: errands.Queue) -> None:
    if not is_postgres(rq.url):
        pytest.skip("PostgreSQL-specific: SQLite reports its WAL size (test above)")
    storage = rq.backend.storage()
    assert storage["wal_bytes"] is None and storage["bytes"] is not None and storage["bytes"] > 0


def test_vacuum_gives_pruned_space_back(rq: errands.Queue) -> None:
    # Enough pruned data (incompressible payloads) that the space given back outweighs any
    # bookkeeping the rewrite adds (PostgreSQL's catalog rows for the new table files).
    n = 400
    t = EPOCH - 2 * DAY
    jobs = [NewJob("bulky", json.dumps({"pad": os.urandom(1500).hex()}), "default", 0, t, 1)]
    ids = rq.backend.enqueue(jobs * n, t, actor="api")
    claimed = rq.backend.claim(ClaimRequest("w1", ["bulky"], None, n, 60), t)
    assert len(claimed) == n
    done = [Succeeded(j.id, j.attempt, t, None) for j in claimed]
    assert rq.backend.finish(done, "w1", t + 1) == [True] * n
    kept = enqueue(rq, "later", at=EPOCH, run_at=EPOCH + DAY)
    assert rq.prune().deleted["succeeded"] == n
    report = rq.vacuum()
    assert report["bytes_after"] is not None and report["bytes_before"] is not None
    assert report["bytes_after"] < report["bytes_before"]
    assert rq.get(ids[0]) is None and rq.get(kept) is not None
    if not is_postgres(rq.url):
        assert _sql(rq, "PRAGMA integrity_check") == [("ok",)]


def test_bad_batch_size(rq: errands.Queue) -> None:
    with pytest.raises(ValueError, match="batch_size"):
        rq.prune(batch_size=0)
    with pytest.raises(ValueError, match="max_batches"):
        pruner(rq, max_batches=0)
