"""``q.stats()``: each of the five questions against a database built to known contents."""

from __future__ import annotations

import json
import math
import random
import sqlite3
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

import errands
from errands import reports as stats
from errands.backends.base import Cancelled, ClaimRequest, Failed, NewJob, Retried, Succeeded
from errands.backends.host import iso
from errands.core import rollup
from errands.core.states import State
from errands.reports import OUTCOMES
from helpers.ops import (
    DAY,
    HOUR,
    assert_figures_equal_a_recount,
    binned,
    claim,
    enqueue,
    register_worker,
    run_job,
)
from helpers.support import EPOCH, FixedClock, first_row, is_postgres, sql_rows


def test_counts_every_state_and_by_queue_type(q: errands.Queue) -> None:
    run_job(q, "a", run_at=EPOCH - 100, started=EPOCH - 90, finished=EPOCH - 80)
    run_job(q, "b", run_at=EPOCH - 100, started=EPOCH - 90, finished=EPOCH - 80, outcome="failed")
    enqueue(q, "a", at=EPOCH - 10, queue="mail")
    enqueue(q, "a", at=EPOCH - 10, queue="mail")
    st = q.stats()
    assert st["counts"] == {
        "waiting": 0,
        "queued": 2,
        "running": 0,
        "succeeded": 1,
        "failed": 1,
        "cancelled": 0,
    }
    assert st["by_queue_type"] == [
        {"status": "failed", "queue": "default", "type": "b", "count": 1},
        {"status": "queued", "queue": "mail", "type": "a", "count": 2},
        {"status": "succeeded", "queue": "default", "type": "a", "count": 1},
    ]


def test_oldest_running_with_worker_liveness(q: errands.Queue, clock: FixedClock) -> None:
    register_worker(q, "alive", at=EPOCH - 5, types=["slow", "quiet"])
    register_worker(q, "dead", at=EPOCH - 600, types=["slow"])
    enqueue(q, "slow", at=EPOCH - 500)
    claim(q, "slow", at=EPOCH - 400, worker="dead", lease=60)  # lease expired at EPOCH-340
    enqueue(q, "quiet", at=EPOCH - 500)
    j = claim(q, "quiet", at=EPOCH - 450, worker="alive", lease=60)
    assert q.backend.heartbeat("alive", [(j.id, j.attempt)], 60, EPOCH - 30) == [True]
    st = q.stats()
    first, second = st["oldest_running"]
    assert (first["type"], first["worker_id"], first["age_seconds"]) == ("slow", "dead", 400.0)
    assert first["worker_alive"] is False and first["past_lease"] is True
    # quiet started earlier but heartbeat since: COALESCE(heartbeat_at, started_at) orders it.
    assert (second["type"], second["worker_id"], second["age_seconds"]) == ("quiet", "alive", 30.0)
    assert second["worker_alive"] is True and second["past_lease"] is False
    assert [w["id"] for w in st["workers"]] == ["alive"]
    assert st["workers"][0]["types"] == ["slow", "quiet"]


def test_oldest_due_wait(q: errands.Queue) -> None:
    enqueue(q, "a", at=EPOCH - 1000, run_at=EPOCH + 100)  # not due yet
    late = enqueue(q, "b", at=EPOCH - 1000, run_at=EPOCH - 250)
    enqueue(q, "c", at=EPOCH - 1000, run_at=EPOCH - 50)
    due = q.stats()["oldest_due"]
    assert due["id"] == late and due["wait_seconds"] == 250.0 and due["type"] == "b"


def test_no_due_job(q: errands.Queue) -> None:
    enqueue(q, "a", at=EPOCH, run_at=EPOCH + 10)
    assert q.stats()["oldest_due"] is None


def test_retry_distribution_in_window(q: errands.Queue) -> None:
    run_job(q, "a", run_at=EPOCH - 100, started=EPOCH - 90, finished=EPOCH - 80)
    run_job(q, "b", run_at=EPOCH - 100, started=EPOCH - 90, finished=EPOCH - 80, failures_first=1)
    run_job(q, "c", run_at=EPOCH - 100, started=EPOCH - 90, finished=EPOCH - 80, failures_first=2)
    run_job(q, "d", run_at=EPOCH - 100, started=EPOCH - 90, finished=EPOCH - 80, failures_first=2)
    run_job(q, "old", run_at=EPOCH - 2 * DAY, started=EPOCH - 2 * DAY, finished=EPOCH - 2 * DAY + 1)
    st = q.stats()
    assert st["retries"]["histogram"] == {"1": 1, "2": 1, "3": 2}
    assert q.stats(window=3 * DAY)["retries"]["histogram"] == {"1": 2, "2": 1, "3": 2}


def test_top_error_codes_with_type_and_last_seen(q: errands.Queue) -> None:
    for i in range(3):
        run_job(
            q, "mail", run_at=EPOCH - 100, started=EPOCH - 90, finished=EPOCH - 80 + i,
            outcome="failed", error_code="SMTP:REJECTED",
        )  # fmt: skip
    run_job(
        q, "pay", run_at=EPOCH - 100, started=EPOCH - 90, finished=EPOCH - 70,
        outcome="failed", error_code="HTTP:502",
    )  # fmt: skip
    run_job(
        q, "pay", run_at=EPOCH - 3 * DAY, started=EPOCH - 3 * DAY, finished=EPOCH - 3 * DAY,
        outcome="failed", error_code="OLD:ONE",
    )  # fmt: skip
    errs = q.stats()["top_errors"]
    assert [(e["error_code"], e["type"], e["count"]) for e in errs] == [
        ("SMTP:REJECTED", "mail", 3),
        ("HTTP:502", "pay", 1),
    ]
    assert errs[0]["last_seen"].startswith("2027-01-15T07:58:42")
    assert q.errors(top=1) == errs[:1]
    assert [e["error_code"] for e in q.errors(since=4 * DAY)][-1] == "OLD:ONE"


def test_last_hour_throughput_and_percentiles(q: errands.Queue) -> None:
    # 20 jobs finished in the last hour: wait i seconds, run 2*i seconds, i = 1..20.
    for i in range(1, 21):
        start = EPOCH - 1800 + i * 10
        run_job(q, f"t{i}", run_at=start - i, started=start, finished=start + 2 * i)
    run_job(
        q, "x", run_at=EPOCH - 1000, started=EPOCH - 990, finished=EPOCH - 900, outcome="failed"
    )
    run_job(
        q, "old", run_at=EPOCH - 2 * HOUR, started=EPOCH - 2 * HOUR, finished=EPOCH - 2 * HOUR + 5
    )
    hour = q.stats()["last_hour"]
    assert hour["processed"] == 21 and hour["succeeded"] == 20 and hour["failed"] == 1
    assert hour["per_minute"] == pytest.approx(21 / 60, abs=1e-3)
    assert hour["failure_rate"] == pytest.approx(1 / 21, abs=1e-4)
    # nearest rank over 21 values: waits 1..20 plus 10 (x); runs 2..40 plus 90 — reported
    # at histogram resolution (the bucket's upper bound, capped by the largest value)
    assert hour["wait_p50"] == binned(10.0, 20.0) and hour["wait_p95"] == binned(19.0, 20.0)
    assert hour["run_p50"] == binned(22.0, 90.0) and hour["run_p95"] == binned(40.0, 90.0)


def test_last_hour_includes_rolled_up_rows(db_url: str, clock: FixedClock) -> None:
    # Retention of 10 minutes: rows finished 30 minutes ago are pruned into the rollup,
    # and the last-hour figures still count them.
    with errands.Queue(db_url, clock=clock, retention={"succeeded": 600}) as q:
        for i in range(5):
            run_job(
                q, "a", run_at=EPOCH - 1800, started=EPOCH - 1800 + i, finished=EPOCH - 1790 + i
            )
        before = q.stats()["last_hour"]
        assert q.prune().total == 5
        after = q.stats()["last_hour"]
        assert after["processed"] == before["processed"] == 5
        assert after["succeeded"] == 5
        assert after["wait_p95"] is not None and after["wait_p95"] >= before["wait_p95"]


def test_queued_types_no_live_worker_handles(q: errands.Queue) -> None:
    register_worker(q, "w-a", at=EPOCH - 1, types=["a"], queues=["default"])
    register_worker(q, "w-gone", at=EPOCH - 1000, types=["b"])
    enqueue(q, "a", at=EPOCH)
    enqueue(q, "a", at=EPOCH, queue="other")  # a, but on a queue w-a does not listen to
    enqueue(q, "b", at=EPOCH)  # only a dead worker handled b
    unhandled = q.stats()["unhandled_types"]
    assert unhandled == [
        {"queue": "default", "type": "b", "queued": 1},
        {"queue": "other", "type": "a", "queued": 1},
    ]
    q.backend.worker_stopped("w-a", EPOCH)
    assert len(q.stats()["unhandled_types"]) == 3


def test_overdue_periodic_in_stats(q: errands.Queue, clock: FixedClock) -> None:
    clock.now = EPOCH - 10 * HOUR

    @q.periodic(every=HOUR, grace=60)
    def hourly() -> None: ...

    clock.now = EPOCH
    assert [o["name"] for o in q.stats()["periodic_overdue"]] == ["hourly"]


# -- bounded cost: the figures come from kept counters, equal to the exact computation -------


def test_bucket_bounds_are_the_rollup_bounds(q: errands.Queue) -> None:
    # Live figures (job_stats_minutely, bucketed by the database) and rolled-up hours
    # (bucketed in Python) merge only if both use the same bounds.
    rows = sql_rows(q.url, "SELECT bucket, upper FROM job_stats_bounds ORDER BY bucket")
    assert [upper for _, upper in rows] == list(rollup.BOUNDS)
    assert [b for b, _ in rows] == list(range(len(rollup.BOUNDS)))


def _random_jobs(q: errands.Queue, rnd: random.Random, batches: int, size: int) -> None:
    """Jobs through the real verbs, each batch claimed and finished together at a random time
    (mostly within two hours of EPOCH, so the window edge cuts through them; some days back),
    with random waits and start times: successes, final failures, failures retried then
    succeeded, cancels of running and of queued jobs, and jobs left running."""
    b = q.backend
    for n in range(batches):
        fin = EPOCH - (rnd.uniform(0, 2 * HOUR) if rnd.random() < 0.8 else rnd.uniform(0, 3 * DAY))
        at = fin - rnd.uniform(1, 600)  # claimed
        jtype = f"t{n}"
        jobs = [
            NewJob(jtype, "{}", rnd.choice(QUEUES), 0, at - rnd.uniform(0, 150), 5)
            for _ in range(size)
        ]
        ids = b.enqueue(jobs, at - 200, actor="api")
        kind = {i: rnd.choices(KINDS, WEIGHTS)[0] for i in ids}
        b.cancel([i for i in ids if kind[i] == "cancel_queued"], "api", at - 0.5)
        held = {j.id: j for j in b.claim(ClaimRequest("w1", [jtype], None, size, 9999), at)}
        started = {i: rnd.uniform(at, fin) for i in held}
        t1, t2 = at + (fin - at) / 3, at + (fin - at) / 2
        retried = [i for i in held if kind[i] == "retried"]
        first = [Retried(i, held[i].attempt, at, "RETRY:ME", "again", None, t1) for i in retried]
        # Left waiting for a retry that is not due yet: unfinished, with an error code.
        first += [
            Retried(i, held[i].attempt, at, "RETRY:LATER", "later", None, EPOCH + DAY)
            for i in held
            if kind[i] == "waiting"
        ]
        assert b.finish(first, "w1", t1) == [True] * len(first)
        for j in b.claim(ClaimRequest("w1", [jtype], None, size, 9999), t2):
            held[j.id], started[j.id] = j, rnd.uniform(t2, fin)
        outs: list[Any] = []
        for i, j in held.items():
            if kind[i] in ("succeeded", "retried"):
                outs.append(Succeeded(i, j.attempt, started[i], None))
            elif kind[i] == "failed":
                outs.append(Failed(i, j.attempt, started[i], "APP:BROKEN", "x", None))
            elif kind[i] == "cancel_running":
                outs.append(Cancelled(i, j.attempt, started[i]))
        assert b.finish(outs, "w1", fin) == [True] * len(outs)


QUEUES = ("default", "mail", "reports")
KINDS = ("succeeded", "failed", "retried", "cancel_running", "cancel_queued", "running", "waiting")
WEIGHTS = (60, 15, 10, 5, 5, 5, 3)


def _exact(url: str, now: float, window: float) -> dict[str, Any]:
    """The reference: today's exact computation over every row (kept here, in the tests, not
    in the package), with the documented window start (the minute holding now - window) and
    run time per attempt (start to outcome)."""
    jobs = sql_rows(
        url, "SELECT status, queue, attempts, run_at, started_at, finished_at FROM jobs"
    )
    attempts = sql_rows(
        url,
        "SELECT a.status, j.queue, a.started_at, a.finished_at FROM job_attempts a "
        "JOIN jobs j ON j.id = a.job_id",
    )
    since = rollup.minute_of(now - HOUR)
    done = [j for j in jobs if j[0] in OUTCOMES and j[5] is not None and j[5] >= since]
    waits = [(j[1], max(j[4] - j[3], 0.0)) for j in done if j[4] is not None]
    runs = [
        (a[1], max(a[3] - a[2], 0.0))
        for a in attempts
        if a[0] in OUTCOMES and a[3] is not None and a[3] >= since
    ]
    retry_since = rollup.minute_of(now - window)
    retried = Counter(j[2] for j in jobs if j[0] in OUTCOMES and j[5] >= retry_since)
    return {
        "counts": Counter(j[0] for j in jobs),
        "outcomes": Counter(j[0] for j in done),
        "waits": waits,
        "runs": runs,
        "retries": {str(k): v for k, v in sorted(retried.items())},
    }


def _nearest_rank(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[max(1, math.ceil(p * len(ordered) - 1e-9)) - 1]


def test_figures_equal_the_exact_computation(db_url: str, clock: FixedClock) -> None:
    rnd = random.Random(14)
    with errands.Queue(db_url, clock=clock) as q:
        _random_jobs(q, rnd, batches=150, size=20)
        st = q.stats(window=2 * DAY)
        rows = q.backend.window_rows(EPOCH - HOUR)
    ref = _exact(db_url, EPOCH, 2 * DAY)
    assert sum(ref["counts"].values()) == 3000

    assert st["counts"] == {s.value: ref["counts"].get(s.value, 0) for s in State}
    hour = st["last_hour"]
    assert {k: hour[k] for k in OUTCOMES} == {k: ref["outcomes"].get(k, 0) for k in OUTCOMES}
    n = sum(ref["outcomes"].values())
    assert hour["processed"] == n and n > 500  # the window holds a good share of the jobs
    assert hour["failure_rate"] == round(ref["outcomes"]["failed"] / n, 4)
    assert st["retries"]["histogram"] == ref["retries"]
    for key, values in (
        ("wait", [v for _, v in ref["waits"]]),
        ("run", [v for _, v in ref["runs"]]),
    ):
        for p, name in ((0.5, "p50"), (0.95, "p95")):
            exact = _nearest_rank(values, p)
            assert hour[f"{key}_{name}"] == pytest.approx(binned(exact, max(values)), abs=1e-4)

    # Per queue (what /metrics exports): bucket counts, sums and maxima are exact.
    _, per_queue = stats.windows(rows)
    for queue in QUEUES:
        for key, pairs in (("wait", ref["waits"]), ("run", ref["runs"])):
            values = [v for qn, v in pairs if qn == queue]
            measure = getattr(per_queue[queue], key)
            expected = rollup.empty()
            for v in values:
                expected[rollup.bucket(v)] += 1
            assert measure.hist == expected, (queue, key)
            assert measure.total == pytest.approx(sum(values), rel=1e-9, abs=1e-6)
            assert measure.maximum == pytest.approx(max(values), abs=1e-6)
    # And the tables themselves, minute by minute (every path:
    # tests/backends/test_figures_paths.py).
    assert_figures_equal_a_recount(db_url)

    # top_errors, bounded by groups, equals the count over the rows from the window's minute.
    since = rollup.minute_of(EPOCH - 2 * DAY)
    at = f"to_timestamp({since})" if is_postgres(db_url) else repr(since)
    exact_errors = sql_rows(
        db_url,
        "SELECT error_code, type, COUNT(*) AS n, MAX(finished_at) FROM jobs "
        f"WHERE error_code IS NOT NULL AND (finished_at >= {at} OR finished_at IS NULL) "
        "GROUP BY error_code, type ORDER BY n DESC, error_code, type",
    )
    assert {r[0] for r in exact_errors} >= {"APP:BROKEN", "RETRY:LATER", "CANCELLED:BY_USER"}
    with errands.Queue(db_url, clock=clock) as q:
        got = q.errors(top=1000, since=2 * DAY)
    assert [(e["error_code"], e["type"], e["count"], e["last_seen"]) for e in got] == [
        (code, jtype, n, iso(last)) for code, jtype, n, last in exact_errors
    ]


def test_counts_follow_retry_and_prune(db_url: str, clock: FixedClock) -> None:
    # job_counts is kept by errands' writes: a manual retry takes a job out of "failed",
    # pruning takes finished jobs out of their state, and the counts stay equal to the rows.
    with errands.Queue(db_url, clock=clock, retention={"succeeded": 600}) as q:
        run_job(q, "a", run_at=EPOCH - 3000, started=EPOCH - 2990, finished=EPOCH - 2980)
        bad = run_job(
            q, "b", run_at=EPOCH - 100, started=EPOCH - 90, finished=EPOCH - 80, outcome="failed"
        )
        assert q.stats()["counts"]["failed"] == 1
        q.retry(bad)
        assert q.stats()["counts"] == {
            "waiting": 0, "queued": 1, "running": 0, "succeeded": 1, "failed": 0, "cancelled": 0,
        }  # fmt: skip
        assert q.prune().total == 1
        assert q.stats()["counts"]["succeeded"] == 0
        assert q.stats()["last_hour"]["processed"] == 2  # pruned or retried, they finished


# Partial indexes that hold only active (or errored) jobs: a full scan of one is bounded by
# those rows, not by the finished jobs of the window.
BOUNDED_INDEXES = {
    "jobs_running",
    "jobs_due",
    "jobs_queued_run_at",
    "jobs_error_code",
    "jobs_errors_unfinished",
    "jobs_waiting",
    "job_attempts_snoozed",
}
CHECKED = {"jobs", "job_attempts", "job_stats_minutely", "job_errors_minutely"}
STATS_QUERIES: dict[str, dict[str, float]] = {
    "state_counts": {},
    "window_rows": {"since": EPOCH - HOUR},
    "attempts_used_since": {"since": EPOCH - DAY},
    "oldest_running": {"limit": 10},
    "running_past_lease": {"now": EPOCH, "grace": 30.0},
    "oldest_due": {"now": EPOCH},
    "top_errors": {"since": EPOCH - DAY, "limit": 10},
    "top_errors_in_rows": {"since": EPOCH - 9 * DAY, "limit": 10},
    "queued_types": {},
    "list_periodic": {},
    "hourly_outcomes": {"since": EPOCH - DAY},  # the dashboard's throughput chart
}
# The operator's selections by state (bulk retry/cancel, prune): one query per index holding a
# state's jobs (jobs_operator.ids_matching), each a range or a walk of a bounded index even
# though a partial index never serves a state bound as a parameter.
NO_FILTER: dict[str, float | str | None] = {"type": None, "queue": None, "error_code": None}
OPERATOR_QUERIES: dict[str, dict[str, float | str | None]] = {
    "ids_matching_queued": NO_FILTER,
    "ids_matching_running": NO_FILTER,
    "ids_matching_waiting": NO_FILTER,
    "ids_matching_finished": {**NO_FILTER, "status": "failed"},
    "prune_count": {"status": "succeeded", "cutoff": EPOCH - HOUR, "now": EPOCH},
    "prune_ids": {"status": "succeeded", "cutoff": EPOCH - HOUR, "limit": 500, "now": EPOCH},
}
# The job list's snoozed view: a window of the index of snoozed attempts, then its jobs by key.
SNOOZED_WINDOW: dict[str, Any] = {**NO_FILTER, "before_id": 2**62, "floor_id": 0, "scan": 10_000}
VIEW_QUERIES: dict[str, dict[str, Any]] = {
    "snoozed_jobs": {**SNOOZED_WINDOW, "limit": 51},
    "snoozed_window": SNOOZED_WINDOW,
}
BOUNDED_READS: dict[str, dict[str, Any]] = {**STATS_QUERIES, **OPERATOR_QUERIES, **VIEW_QUERIES}


def _pg_scans(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", []):
        yield from _pg_scans(child)


@pytest.mark.parametrize("name", sorted(BOUNDED_READS))
def test_stats_queries_never_scan_the_finished_rows(q: errands.Queue, name: str) -> None:
    # A planner regression (or a dropped index) that falls back to reading every row of
    # jobs / job_attempts / job_stats_minutely fails here, on both databases.
    run_job(q, "a", run_at=EPOCH - 100, started=EPOCH - 90, finished=EPOCH - 80)
    sql, params = q.backend.q[name], BOUNDED_READS[name]  # type: ignore[attr-defined]
    if not is_postgres(q.url):
        conn = sqlite3.connect(q.url)
        try:
            plan = [str(r[3]) for r in conn.execute("EXPLAIN QUERY PLAN " + sql, params)]
        finally:
            conn.close()
        for step in plan:
            words = step.replace("(", " ").split()
            if words[0] == "SCAN" and words[1] in CHECKED:
                assert BOUNDED_INDEXES & set(words), f"{name}: {step}\n{plan}"
        return
    import psycopg

    with psycopg.connect(q.url) as pg:
        # Tiny test tables make a sequential scan cheapest; with it priced out, one still
        # chosen means no index can serve the query.
        pg.execute("SET enable_seqscan = off")
        (explained,) = first_row(pg.execute("EXPLAIN (FORMAT JSON) " + sql, params).fetchone())
    root = explained[0]["Plan"]
    for node in _pg_scans(root):
        relation = node.get("Relation Name")
        if relation in CHECKED:
            assert node["Node Type"] != "Seq Scan", f"{name}: {json.dumps(root)}"
        index_scan = node["Node Type"] in ("Index Scan", "Index Only Scan")
        if node["Node Type"] == "Bitmap Index Scan" or (index_scan and relation in CHECKED):
            bounded = "Index Cond" in node or node.get("Index Name") in BOUNDED_INDEXES
            assert bounded, f"{name}: full index scan {json.dumps(node)}"


def test_the_selection_by_state_is_the_rows_of_that_state(q: errands.Queue) -> None:
    # Bulk retry/cancel select through one query per index (queued, running, every final
    # state): each, with or without filters, returns exactly the ids a plain WHERE over the
    # rows would.
    run_job(q, "a", run_at=EPOCH - 100, started=EPOCH - 90, finished=EPOCH - 80)
    run_job(q, "b", run_at=EPOCH - 100, started=EPOCH - 90, finished=EPOCH - 80, outcome="failed")
    run_job(q, "a", run_at=EPOCH - 70, started=EPOCH - 60, finished=None, outcome="running")
    mail = enqueue(q, "a", at=EPOCH - 50, queue="mail")
    enqueue(q, "b", at=EPOCH - 50)
    q.cancel(enqueue(q, "a", at=EPOCH - 40))
    q.enqueue("b", {}, queue="mail", after=[mail])  # waiting
    filters: list[dict[str, str | None]] = [
        {"type": None, "queue": None, "error_code": None},
        {"type": "a", "queue": None, "error_code": None},
        {"type": None, "queue": "mail", "error_code": None},
        {"type": None, "queue": None, "error_code": "APP:BROKEN"},
    ]
    every: dict[State, list[tuple[Any, ...]]] = {s: [] for s in State}
    for job_id, status, jtype, queue, code in sql_rows(
        q.url, "SELECT id, status, type, queue, error_code FROM jobs ORDER BY id"
    ):
        every[State(status)].append((job_id, jtype, queue, code))
    assert all(every.values()), every  # every state has a job to find
    for state, rows in every.items():
        for f in filters:
            expected = [
                i
                for i, jtype, queue, code in rows
                if f["type"] in (None, jtype)
                and f["queue"] in (None, queue)
                and f["error_code"] in (None, code)
            ]
            got = q.backend.match_ids(state.value, **f)
            assert got == expected, (state, f)


def test_prune_forgets_minutes_past_eight_days(db_url: str, clock: FixedClock) -> None:
    with errands.Queue(db_url, clock=clock) as q:
        run_job(
            q, "old", run_at=EPOCH - 9 * DAY, started=EPOCH - 9 * DAY, finished=EPOCH - 9 * DAY + 1
        )
        run_job(q, "new", run_at=EPOCH - 100, started=EPOCH - 90, finished=EPOCH - 80)
        cutoff = EPOCH - 8 * DAY
        at = f"to_timestamp({cutoff})" if is_postgres(db_url) else str(cutoff)
        kept = f"SELECT COUNT(*) FROM job_stats_minutely WHERE minute < {at}"
        assert sql_rows(db_url, kept) != [(0,)]
        assert q.prune().total == 0  # both within retention: only the figures are tidied
        assert sql_rows(db_url, kept) == [(0,)]
        # A window longer than the minutes kept counts the rows still in the table instead.
        assert q.stats(window=10 * DAY)["retries"]["histogram"] == {"1": 2}
        assert q.stats(window=DAY)["retries"]["histogram"] == {"1": 1}


def test_a_lost_attempt_has_no_run_time(q: errands.Queue) -> None:
    # The rescuer closes a lost attempt when it notices, not when the handler stopped: only
    # the attempt that reached an outcome counts as run time.
    enqueue(q, "a", at=EPOCH - 1000)
    claim(q, "a", at=EPOCH - 900, lease=60)
    assert q.backend.rescue(EPOCH - 700).recovered
    j = claim(q, "a", at=EPOCH - 600)
    assert q.backend.finish([Succeeded(j.id, j.attempt, EPOCH - 600, None)], "w1", EPOCH - 590)
    hour = q.stats()["last_hour"]
    assert hour["processed"] == 1 and hour["run_p95"] == binned(10.0, 10.0)
    runs = [r for r in q.backend.window_rows(EPOCH - HOUR) if r.measure == "run"]
    assert [(r.count, r.total) for r in runs] == [(1, 10.0)]


def test_prune_folds_the_counter_shards(db_url: str, clock: FixedClock) -> None:
    # PostgreSQL: each connection counts into its own shard (no waits between workers); prune
    # folds them into shard 0 and every figure stays the same. SQLite: shard 0 all along.
    with errands.Queue(db_url, clock=clock) as q:
        run_job(q, "a", run_at=EPOCH - 1000, started=EPOCH - 990, finished=EPOCH - 980)
        run_job(
            q, "b", run_at=EPOCH - 1000, started=EPOCH - 990, finished=EPOCH - 970, outcome="failed"
        )
        before = q.stats()
        shards = "SELECT COUNT(*) FROM {} WHERE shard <> 0"
        if is_postgres(db_url):
            assert sql_rows(db_url, shards.format("job_counts")) != [(0,)]
        q.prune()
        after = q.stats()
        for table in ("job_counts", "job_stats_minutely"):
            assert sql_rows(db_url, shards.format(table)) == [(0,)]
        assert (after["counts"], after["last_hour"]) == (before["counts"], before["last_hour"])
