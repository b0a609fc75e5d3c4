"""Prometheus metrics: parse with the official parser, values, bounded and escaped labels."""

from __future__ import annotations

from typing import Any

import pytest

import errands
from errands.backends.base import ClaimRequest, Succeeded, WorkerInfo
from errands.metrics import MAX_SERIES, OTHER, render_metrics
from helpers.ops import DAY, claim, enqueue, run_job
from helpers.support import EPOCH, FixedClock, get_job, is_postgres

parser = pytest.importorskip("prometheus_client.parser")


def _families(q: errands.Queue) -> dict[str, Any]:
    text = render_metrics(q).decode()
    return {f.name: f for f in parser.text_string_to_metric_families(text)}


def _samples(fam: Any, suffix: str = "") -> dict[tuple[tuple[str, str], ...], float]:
    return {
        tuple(sorted(s.labels.items())): s.value for s in fam.samples if s.name == fam.name + suffix
    }


def test_metrics_parse_and_count(q: errands.Queue) -> None:
    run_job(q, "ok", run_at=EPOCH - 100, started=EPOCH - 95, finished=EPOCH - 90)
    run_job(q, "bad", run_at=EPOCH - 100, started=EPOCH - 99, finished=EPOCH - 90, outcome="failed")
    enqueue(q, "ok", at=EPOCH - 30, queue="mail")
    fams = _families(q)
    jobs = _samples(fams["errands_jobs"])
    assert jobs[(("queue", "mail"), ("state", "queued"), ("type", "ok"))] == 1
    states = _samples(fams["errands_jobs_in_state"])
    assert {dict(k)["state"]: v for k, v in states.items()} == {
        "waiting": 0, "queued": 1, "running": 0, "succeeded": 1, "failed": 1, "cancelled": 0,
    }  # fmt: skip
    finished = _samples(fams["errands_jobs_finished"], "_total")
    assert finished[(("outcome", "failed"), ("queue", "default"), ("type", "bad"))] == 1
    failed = _samples(fams["errands_jobs_failed"], "_total")
    assert failed == {(("queue", "default"), ("type", "bad")): 1}
    assert _samples(fams["errands_oldest_due_wait_seconds"]) == {(): 30.0}
    wait = _samples(fams["errands_job_wait_seconds"], "_bucket")
    assert wait[(("le", "+Inf"), ("queue", "default"))] == 2
    assert wait[(("le", "1.0"), ("queue", "default"))] == 1  # waits 5 s and 1 s
    assert "errands_database_bytes" in fams
    # The WAL gauge is SQLite's (its -wal file); PostgreSQL has no such figure and omits it.
    assert ("errands_sqlite_wal_bytes" in fams) is not is_postgres(q.url)


def test_counters_survive_pruning(db_url: str, clock: FixedClock) -> None:
    with errands.Queue(db_url, clock=clock, retention={"succeeded": DAY}) as q:
        for i in range(3):
            t = EPOCH - 2 * DAY + i
            run_job(q, "ok", run_at=t, started=t, finished=t + 1)
        key = (("outcome", "succeeded"), ("queue", "default"), ("type", "ok"))
        before = _samples(_families(q)["errands_jobs_finished"], "_total")[key]
        assert q.prune().total == 3
        after = _samples(_families(q)["errands_jobs_finished"], "_total")[key]
        assert before == after == 3


def test_counters_never_go_down_across_a_retry_and_a_prune(db_url: str, clock: FixedClock) -> None:
    # A job fails for good, is retried by hand, succeeds, and is pruned: failed_total stays 1
    # (it did fail once) and finished_total counts both outcomes; the per-state gauge is what
    # moves. Sampled after every step, each counter is non-decreasing.
    with errands.Queue(db_url, clock=clock, retention={"succeeded": DAY, "failed": DAY}) as q:
        t = EPOCH - 2 * DAY
        job_id = run_job(q, "flaky", run_at=t, started=t, finished=t + 1, outcome="failed")
        fail_key = (("queue", "default"), ("type", "flaky"))
        ok_key = (("outcome", "succeeded"), ("queue", "default"), ("type", "flaky"))
        bad_key = (("outcome", "failed"), ("queue", "default"), ("type", "flaky"))
        state_key = (("queue", "default"), ("state", "failed"), ("type", "flaky"))

        def sample() -> tuple[float, float, float, float]:
            fams = _families(q)
            failed = _samples(fams["errands_jobs_failed"], "_total").get(fail_key, 0.0)
            finished = _samples(fams["errands_jobs_finished"], "_total")
            gauge = _samples(fams["errands_jobs"]).get(state_key, 0.0)
            return failed, finished.get(bad_key, 0.0), finished.get(ok_key, 0.0), gauge

        steps = [sample()]
        assert steps[0] == (1, 1, 0, 1)
        q.backend.retry([job_id], "test", t + 10)
        steps.append(sample())
        assert steps[-1] == (1, 1, 0, 0)  # the gauge drops; the counters do not
        j = claim(q, "flaky", at=t + 20)
        assert q.backend.finish([Succeeded(j.id, j.attempt, t + 20, None)], "w1", t + 21) == [True]
        steps.append(sample())
        assert steps[-1] == (1, 1, 1, 0)
        assert q.prune().total == 1
        steps.append(sample())
        assert steps[-1] == (1, 1, 1, 0)
        for counter in range(3):
            values = [s[counter] for s in steps]
            assert values == sorted(values), (counter, steps)


def test_label_values_are_escaped(q: errands.Queue) -> None:
    nasty = 'we"ird\\type\nwith newline'
    enqueue(q, nasty, at=EPOCH)
    text = render_metrics(q).decode()
    assert 'type="we\\"ird\\\\type\\nwith newline"' in text
    jobs = _samples(_families(q)["errands_jobs"])
    assert jobs[(("queue", "default"), ("state", "queued"), ("type", nasty))] == 1


def test_label_sets_are_bounded(q: errands.Queue) -> None:
    q.enqueue_many([(f"type{i}", {}) for i in range(MAX_SERIES + 50)])
    jobs = _samples(_families(q)["errands_jobs"])
    assert len(jobs) == MAX_SERIES
    assert jobs[(("queue", "default"), ("state", "queued"), ("type", OTHER))] == 51


def test_periodic_overdue_metric(q: errands.Queue, clock: FixedClock) -> None:
    q.periodic(every=60, name="beat", grace=60)(lambda: None)
    clock.now = EPOCH + 3600
    overdue = _samples(_families(q)["errands_periodic_overdue"])
    assert overdue == {(("name", "beat"),): 1.0}


def _total(fams: dict[str, Any], name: str) -> float:
    (sample,) = [s for s in fams[name].samples if s.name == name + "_total"]
    return float(sample.value)


def test_worker_counters_are_summed_over_every_worker(q: errands.Queue) -> None:
    info = WorkerInfo("h:1:a", "h", 1, None, 1)
    q.backend.register_worker(info, EPOCH)
    q.backend.register_worker(WorkerInfo("h:2:b", "h", 2, None, 1), EPOCH)
    q.backend.worker_seen("h:1:a", EPOCH, {"refused": 2, "rescued": 3, "db_errors": 1})
    q.backend.worker_stopped("h:2:b", EPOCH + 1, {"refused": 1, "rescued": 0, "db_errors": 4})
    q.backend.worker_seen("h:1:a", EPOCH + 2)  # no counters: the last ones are kept
    fams = _families(q)
    assert _total(fams, "errands_fencing_refusals") == 3
    assert _total(fams, "errands_jobs_rescued") == 3
    assert _total(fams, "errands_database_errors") == 5


def test_a_rescue_by_a_real_worker_is_counted(q: errands.Queue) -> None:
    @q.task
    def ok() -> None:
        return None

    job_id = enqueue(q, "ok", at=EPOCH - 120)
    request = ClaimRequest("elsewhere:9:gone", ["ok"], None, 1, 5.0)
    assert [j.id for j in q.backend.claim(request, EPOCH - 60)] == [job_id]  # lease long expired
    q.run_worker(burst=True, handle_signals=False)
    assert get_job(q, job_id).status == "succeeded"
    assert _total(_families(q), "errands_jobs_rescued") == 1


def test_run_time_is_per_attempt(q: errands.Queue) -> None:
    # A job that failed once and then succeeded ran twice: two run times (each attempt's start
    # to its outcome), one wait (due to the start of its last attempt).
    run_job(
        q, "flaky", run_at=EPOCH - 100, started=EPOCH - 50, finished=EPOCH - 40, failures_first=1
    )
    fams = _families(q)
    run = _samples(fams["errands_job_run_seconds"], "_bucket")
    wait = _samples(fams["errands_job_wait_seconds"], "_bucket")
    assert run[(("le", "+Inf"), ("queue", "default"))] == 2
    assert wait[(("le", "+Inf"), ("queue", "default"))] == 1
    assert _samples(fams["errands_job_run_seconds_gsum"]) == {(("queue", "default"),): 10.0}
