"""Dependencies, chains and batches (docs/pipelines.md), on both backends: after=[…], the waiting
state, the release in the outcome's transaction, the cascade, batches, ctx.upstream()."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

import errands
from errands.backends.base import Needs
from helpers.support import event_names


def tasks(q: errands.Queue) -> None:
    """Handlers the tests run: ``step`` returns its payload's n (or fails when told);
    ``collect`` returns what its upstream jobs returned (ctx.upstream())."""

    @q.task(max_attempts=1)
    def step(n: int = 0, fail: bool = False) -> int:
        if fail:
            raise errands.JobError("TEST:FAIL", "told to fail", retry=False)
        return n

    @q.task(max_attempts=1)
    def collect(ctx: errands.JobContext) -> list[Any]:
        return [[j.id, j.status, j.result] for j in ctx.upstream()]


def status(q: errands.Queue, job_id: int) -> str:
    job = q.get(job_id)
    assert job is not None
    return job.status


def drain(q: errands.Queue) -> None:
    q.run_worker(burst=True, concurrency=2, handle_signals=False)


def test_fan_in_waits_for_every_upstream_then_runs_once(queue: errands.Queue) -> None:
    tasks(queue)
    ups = [queue.enqueue("step", {"n": i}) for i in range(5)]
    down = queue.enqueue("collect", {}, after=ups)
    assert status(queue, down) == "waiting"
    assert queue.stats()["counts"]["waiting"] == 1
    drain(queue)
    job = queue.get(down)
    assert job is not None and job.status == "succeeded"
    assert job.result == [[u, "succeeded", i] for i, u in enumerate(ups)]
    assert event_names(queue, down) == ["WAITING", "READY", "CLAIMED", "SUCCEEDED"]
    waiting = queue.events(down)[0]
    assert waiting.detail == {"after": ups}
    ready = queue.events(down)[1]
    assert ready.detail["upstream"] in ups  # the outcome that released it


def test_a_waiting_job_is_not_claimed_until_its_last_upstream_is_final(
    queue: errands.Queue,
) -> None:
    tasks(queue)
    a = queue.enqueue("step", {"n": 1}, delay=3600)  # not due: stays queued
    b = queue.enqueue("step", {"n": 2})
    down = queue.enqueue("collect", {}, after=[a, b])
    drain(queue)
    assert (status(queue, b), status(queue, down)) == ("succeeded", "waiting")
    queue.cancel(a)  # the last upstream becomes final: cancelled, so the dependent is too
    job = queue.get(down)
    assert job is not None and (job.status, job.error_code, job.attempts) == (
        "cancelled",
        "UPSTREAM:FAILED",
        0,
    )


def test_a_failure_cascades_down_a_chain(queue: errands.Queue) -> None:
    tasks(queue)
    ids = queue.chain(
        [("step", {"n": 1}), ("step", {"fail": True}), ("step", {"n": 3}), ("step", {"n": 4})]
    )
    drain(queue)
    got = [queue.get(i) for i in ids]
    assert [(j.status, j.error_code, j.attempts) for j in got if j] == [
        ("succeeded", None, 1),
        ("failed", "TEST:FAIL", 1),
        ("cancelled", "UPSTREAM:FAILED", 0),
        ("cancelled", "UPSTREAM:FAILED", 0),
    ]
    assert event_names(queue, ids[3]) == ["WAITING", "CANCELLED"]
    counts = queue.stats()["counts"]
    assert (counts["cancelled"], counts["waiting"]) == (2, 0)


def test_run_on_upstream_failure_runs_whatever_the_outcome(queue: errands.Queue) -> None:
    tasks(queue)
    ok = queue.enqueue("step", {"n": 1})
    bad = queue.enqueue("step", {"fail": True})
    down = queue.enqueue("collect", {}, after=[ok, bad], on_upstream_failure="run")
    drain(queue)
    job = queue.get(down)
    assert job is not None and job.status == "succeeded"
    assert job.result == [[ok, "succeeded", 1], [bad, "failed", None]]


def test_a_chain_step_may_run_whatever_the_step_before_did(queue: errands.Queue) -> None:
    tasks(queue)
    ids = queue.chain(
        [
            ("step", {"fail": True}),
            ("collect", {}, {"on_upstream_failure": "run"}),
            ("step", {"n": 3}),
        ]
    )
    drain(queue)
    assert [status(queue, i) for i in ids] == ["failed", "succeeded", "succeeded"]
    with pytest.raises(errands.ConfigurationError, match="'cancel' or 'run'"):
        queue.chain([("step", {}), ("step", {}, {"on_upstream_failure": "maybe"})])


def test_chain_runs_in_order(queue: errands.Queue) -> None:
    tasks(queue)
    ids = queue.chain([("step", {"n": i}) for i in range(6)])
    assert [status(queue, i) for i in ids] == ["queued"] + ["waiting"] * 5
    drain(queue)
    jobs = [queue.get(i) for i in ids]
    assert all(j is not None and j.status == "succeeded" for j in jobs)
    for k in range(1, len(ids)):  # each started after the one before finished
        before, this = jobs[k - 1], jobs[k]
        assert before is not None and this is not None
        assert before.finished_at is not None and this.started_at is not None
        assert this.started_at >= before.finished_at
    assert queue.upstream(ids[3])[0].id == ids[2]
    assert [j.id for j in queue.downstream(ids[3])] == [ids[4]]


def test_batch_is_all_or_nothing_with_one_callback(queue: errands.Queue) -> None:
    tasks(queue)
    with pytest.raises(RuntimeError), queue.batch(on_complete=("collect", {})) as failed:
        failed.enqueue("step", {"n": 1})
        raise RuntimeError("the block failed")
    assert failed.id is None and queue.jobs() == []  # nothing was written

    with queue.batch(on_complete=("collect", {})) as batch:
        for i in range(10):
            batch.enqueue("step", {"n": i, "fail": i == 3})
    assert batch.id is not None and len(batch.ids) == 10
    info = queue.get_batch(batch.id)
    assert (info.status, info.counts["queued"], info.total, info.done) == ("waiting", 10, 10, False)
    drain(queue)
    info = queue.get_batch(batch.id)
    assert (info.status, info.counts["succeeded"], info.counts["failed"], info.done) == (
        "succeeded",
        9,
        1,
        True,
    )
    callback = queue.get(batch.id)
    assert callback is not None and len(callback.result) == 10
    assert event_names(queue, batch.id).count("READY") == 1
    assert event_names(queue, batch.id).count("CLAIMED") == 1


def test_batch_bad_member_writes_nothing(queue: errands.Queue) -> None:
    tasks(queue)
    with pytest.raises(errands.UnknownTaskError), queue.batch(on_complete=("collect", {})) as b:
        b.enqueue("step", {"n": 1})
        b.enqueue("nope", {})
    assert queue.jobs() == []


def test_an_empty_batch_runs_its_callback(queue: errands.Queue) -> None:
    tasks(queue)
    with queue.batch(on_complete=("collect", {})) as batch:
        pass
    assert batch.id is not None and batch.ids == []
    assert status(queue, batch.id) == "queued"
    drain(queue)
    job = queue.get(batch.id)
    assert job is not None and (job.status, job.result) == ("succeeded", [])
    assert queue.get_batch(batch.id).total == 0


def test_unknown_upstream_ids_are_refused_before_any_write(queue: errands.Queue) -> None:
    tasks(queue)
    a = queue.enqueue("step", {})
    with pytest.raises(errands.JobNotFoundError, match=r"after= names no such job \(424242\)"):
        queue.enqueue("collect", {}, after=[a, 424242])
    with pytest.raises(errands.JobNotFoundError):
        queue.enqueue_many([("step", {}), ("collect", {}, {"after": [424243]})])
    assert [j.id for j in queue.jobs()] == [a]
    with pytest.raises(errands.ConfigurationError, match="list of job ids"):
        queue.enqueue("collect", {}, after=a)  # type: ignore[arg-type]
    with pytest.raises(errands.ConfigurationError, match="'cancel' or 'run'"):
        queue.enqueue("collect", {}, after=[a], on_upstream_failure="maybe")


def test_upstreams_already_final_count_at_once(queue: errands.Queue) -> None:
    tasks(queue)
    ok = queue.enqueue("step", {"n": 1})
    bad = queue.enqueue("step", {"fail": True})
    drain(queue)
    ready = queue.enqueue("collect", {}, after=[ok])
    assert status(queue, ready) == "queued"
    assert event_names(queue, ready) == ["WAITING", "READY"]
    doomed = queue.enqueue("collect", {}, after=[ok, bad])
    job = queue.get(doomed)
    assert job is not None and (job.status, job.error_code) == ("cancelled", "UPSTREAM:FAILED")
    # The chain behind a dependent cancelled at enqueue is cancelled in the same write.
    ids = queue.chain([("step", {}, {"after": [bad]}), ("step", {})])
    assert [status(queue, i) for i in ids] == ["cancelled", "cancelled"]
    run = queue.enqueue("collect", {}, after=[bad], on_upstream_failure="run")
    assert status(queue, run) == "queued"


def test_enqueue_many_and_with_options_and_async_take_after(queue: errands.Queue) -> None:
    tasks(queue)
    a = queue.enqueue("step", {"n": 1})
    ids = queue.enqueue_many([("step", {"n": 2}), ("collect", {}, {"after": [a]})])
    assert status(queue, ids[1]) == "waiting"
    step = queue.tasks["step"]
    bound = step.with_options(after=[ids[0]], on_upstream_failure="run")
    b = bound.enqueue(n=3)
    c = asyncio.run(queue.enqueue_async("collect", {}, after=[b]))
    d = asyncio.run(queue.enqueue_many_async([("collect", {}, {"after": [c]})]))[0]
    assert [status(queue, i) for i in (b, c, d)] == ["waiting"] * 3
    drain(queue)
    assert [status(queue, i) for i in (*ids, b, c, d)] == ["succeeded"] * 5


def test_cancel_of_a_waiting_job_cascades(queue: errands.Queue) -> None:
    tasks(queue)
    a = queue.enqueue("step", {}, delay=3600)
    ids = queue.chain([("step", {}, {"after": [a]}), ("step", {})])
    assert queue.cancel(ids[0]) == "cancelled"
    assert [status(queue, i) for i in (a, *ids)] == ["queued", "cancelled", "cancelled"]
    assert queue.get(ids[1]) is not None
    job = queue.get(ids[1])
    assert job is not None and job.error_code == "UPSTREAM:FAILED"


def cascade_rounds(q: errands.Queue, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the statements each release (backends/deps.py ``_release_steps``) runs: the
    real release runs, each step it yields is counted on its way to the database."""
    backend: Any = type(q.backend)
    real = backend._release_steps
    counts: list[int] = []

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        steps = real(self, *args, **kwargs)
        n = 0
        try:
            step = next(steps)
            while True:
                n += 1
                step = steps.send((yield step))
        except StopIteration as end:
            counts.append(n)
            return end.value

    monkeypatch.setattr(backend, "_release_steps", counted)
    return counts


@pytest.mark.parametrize("length", [30, 300])
def test_cancelling_a_chains_head_costs_the_same_statements_however_long_the_chain(
    queue: errands.Queue, monkeypatch: pytest.MonkeyPatch, length: int
) -> None:
    # Cancelling the head of a 3,001-step chain took a round of statements per step, in one
    # transaction: 2.6 s holding SQLite's write lock, 22.7 s on PostgreSQL. The single-upstream
    # chains below a cancelled job are now cancelled in one pass (doomed_chains).
    tasks(queue)
    ids = queue.chain([("step", {"n": n}) for n in range(length)])
    side = queue.enqueue("collect", {}, after=[ids[5], ids[7]])  # two upstreams in the chain
    spared = queue.enqueue("collect", {}, after=[ids[9]], on_upstream_failure="run")
    rounds = cascade_rounds(queue, monkeypatch)
    assert queue.cancel(ids[0]) == "cancelled"
    assert rounds and rounds[0] <= 40, rounds  # 30 steps or 300: the same few statements
    assert [status(queue, i) for i in ids] == ["cancelled"] * length
    assert status(queue, side) == "cancelled" and status(queue, spared) == "queued"
    last = queue.get(ids[-1])
    assert last is not None and last.error_code == "UPSTREAM:FAILED"
    assert event_names(queue, ids[-1]) == ["WAITING", "CANCELLED"]
    assert queue.stats()["counts"]["cancelled"] == length + 1


def test_retry_of_a_failed_upstream_revives_the_dependents_it_cancelled(
    queue: errands.Queue,
) -> None:
    fixed = [False]

    @queue.task(max_attempts=1)
    def fragile() -> str:
        if not fixed[0]:
            raise errands.JobError("TEST:FAIL", "not yet", retry=False)
        return "ok"

    tasks(queue)
    ids = queue.chain([("fragile", {}), ("step", {"n": 2}), ("step", {"n": 3})])
    drain(queue)
    assert [status(queue, i) for i in ids] == ["failed", "cancelled", "cancelled"]
    assert queue.stats()["counts"]["cancelled"] == 2
    queue.retry(ids[0])
    assert [status(queue, i) for i in ids] == ["queued", "waiting", "waiting"]
    assert event_names(queue, ids[2]) == ["WAITING", "CANCELLED", "RETRIED"]
    assert queue.stats()["counts"]["cancelled"] == 0
    fixed[0] = True
    drain(queue)
    assert [status(queue, i) for i in ids] == ["succeeded"] * 3
    assert event_names(queue, ids[2]).count("READY") == 1


def test_prune_keeps_an_upstream_a_waiting_job_depends_on(queue: errands.Queue) -> None:
    tasks(queue)
    done = queue.enqueue("step", {"n": 1})
    other = queue.enqueue("step", {"n": 2})
    drain(queue)
    later = queue.enqueue("step", {}, delay=10 * 365 * 86400)
    down = queue.enqueue("collect", {}, after=[done, later])
    report = queue.prune(now=queue.clock() + 400 * 86400)
    assert report.deleted.get("succeeded") == 1
    assert queue.get(other) is None  # pruned: nothing waits for it
    assert queue.get(done) is not None  # kept: a waiting job depends on it
    assert status(queue, down) == "waiting"


def test_sweeper_repairs_a_waiting_job_whose_upstreams_are_final(
    queue: errands.Queue,
) -> None:
    """The case the release never leaves: a waiting job with every upstream final (here an
    edge reopened by hand). check counts it; the sweeper releases it, once."""
    tasks(queue)
    a = queue.enqueue("step", {"n": 1})
    drain(queue)
    # A row changed by hand: a new dependent whose edge is open though its upstream is final.
    stuck = queue.backend.enqueue_after(
        [_plain(queue)], [Needs((a,))], queue.clock(), actor="test"
    )[0]
    with queue.backend._write("test") as conn:  # type: ignore[attr-defined]
        conn.execute("UPDATE job_deps SET upstream_status = NULL WHERE job_id = " + str(stuck))
        conn.execute("UPDATE jobs SET status = 'waiting' WHERE id = " + str(stuck))
    assert queue.backend.unreleased(100) == 1
    sweeper = next(s for s in queue.services() if s.name == "deps")
    report = sweeper.run_once(queue.clock())
    assert report.closed == 1 and report.settled == [stuck]
    assert status(queue, stuck) == "queued"
    assert queue.backend.unreleased(100) == 0
    assert sweeper.run_once(queue.clock()).settled == []
    assert event_names(queue, stuck).count("READY") == 2  # once at enqueue, once repaired


def _plain(q: errands.Queue) -> Any:
    from errands.backends.base import NewJob

    now = q.clock()
    return NewJob("step", "{}", "default", 0, now, 1)


def test_upstreams_finishing_at_the_same_moment_release_their_dependent_once(
    queue: errands.Queue,
) -> None:
    """Two members of a fan-in finish in two transactions at once, pair after pair: on
    PostgreSQL each could see the other's edge still open; locking the dependent first makes
    the later one see both closed. Every callback is released, once."""
    from errands.backends.base import ClaimRequest, Succeeded

    tasks(queue)
    pairs = 40
    callbacks = []
    for _ in range(pairs):
        with queue.batch(on_complete=("collect", {})) as batch:
            batch.enqueue("step", {})
            batch.enqueue("step", {})
        callbacks.append(batch)
    b = queue.backend
    now = queue.clock()
    held = b.claim(ClaimRequest("w", ["step"], None, 2 * pairs, 60), now)
    attempt = {j.id: j.attempt for j in held}
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def finish(job_id: int) -> None:
        try:
            barrier.wait(10)
            b.finish([Succeeded(job_id, attempt[job_id], now, "0")], "w", now)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    for batch in callbacks:
        threads = [threading.Thread(target=finish, args=(i,)) for i in batch.ids]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    assert errors == []
    assert [status(queue, batch.id) for batch in callbacks if batch.id] == ["queued"] * pairs
    assert all(event_names(queue, c.id).count("READY") == 1 for c in callbacks if c.id)


def test_an_enqueue_after_a_job_finishing_at_that_moment_is_never_left_waiting(
    queue: errands.Queue,
) -> None:
    """An upstream's outcome and an enqueue after it, at once, round after round: the
    enqueue reads its upstreams share-locked on PostgreSQL, so either it sees the outcome
    (and counts it at once) or the outcome's transaction sees its new edge."""
    from errands.backends.base import ClaimRequest, Succeeded

    tasks(queue)
    rounds = 40
    ups = [queue.enqueue("step", {}) for _ in range(rounds)]
    b = queue.backend
    now = queue.clock()
    held = {j.id: j.attempt for j in b.claim(ClaimRequest("w", ["step"], None, rounds, 60), now)}
    downs: list[int] = []
    errors: list[BaseException] = []
    for up in ups:
        barrier = threading.Barrier(2)

        def finish(job_id: int = up, gate: threading.Barrier = barrier) -> None:
            try:
                gate.wait(10)
                b.finish([Succeeded(job_id, held[job_id], now, "0")], "w", now)
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        def enqueue(job_id: int = up, gate: threading.Barrier = barrier) -> None:
            try:
                gate.wait(10)
                downs.append(queue.enqueue("collect", {}, after=[job_id]))
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=finish), threading.Thread(target=enqueue)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    assert errors == []
    assert [status(queue, d) for d in downs] == ["queued"] * rounds


def test_the_sqlite_jobs_rebuild_keeps_every_row_and_id(tmp_path: Any) -> None:
    """Migration 0009 rebuilds SQLite's jobs table (a CHECK changes only so): with foreign
    keys on, dropping the old table would cascade-delete every attempt and event. Run it
    again on a database with history: every job, attempt, event and edge stays, ids keep
    growing past the largest ever issued, and the indexes are back."""
    import sqlite3

    from errands.backends import sql

    path = str(tmp_path / "app.db")
    with errands.Queue(path) as q:
        tasks(q)
        ids = q.chain([("step", {"n": 1}), ("step", {"fail": True}), ("step", {})])
        drain(q)
        newest = q.enqueue("step", {})
    history = (
        "SELECT * FROM jobs WHERE id <= 3",
        "SELECT * FROM job_attempts WHERE job_id <= 3 ORDER BY id",
        "SELECT * FROM job_events WHERE job_id <= 3 ORDER BY id",
        "SELECT * FROM job_deps ORDER BY 1, 2",
        "SELECT name, sql FROM sqlite_master WHERE type = 'index' ORDER BY name",
    )
    assert ids == [1, 2, 3]
    conn = sqlite3.connect(path)
    before = [conn.execute(query).fetchall() for query in history]
    assert all(before)
    (rebuild,) = [v for v, text in sql.migrations("sqlite") if "jobs_new" in text]
    conn.execute("PRAGMA foreign_keys = ON")
    with conn:
        conn.execute("DELETE FROM jobs WHERE id = ?", (newest,))  # the largest id, gone
        conn.execute("DELETE FROM errands_migrations WHERE version >= ?", (rebuild,))
    conn.close()
    with errands.Queue(path) as q:
        assert q.enqueue("step", {}) > newest  # never reused
    conn = sqlite3.connect(path)
    assert [conn.execute(query).fetchall() for query in history] == before
    assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    conn.close()


def test_transactional_completion_releases_in_the_applications_transaction(
    queue: errands.Queue, db_url: str, is_sqlite: bool
) -> None:
    """ctx.complete(connection=…) records the success in the application's transaction: the
    release rides in it too — rolled back, nothing; committed, the dependent is queued."""
    import sqlite3

    from errands.backends.base import ClaimRequest, Succeeded

    tasks(queue)
    up = queue.enqueue("step", {})
    down = queue.enqueue("collect", {}, after=[up])
    now = queue.clock()
    (held,) = queue.backend.claim(ClaimRequest("w", ["step"], None, 1, 60), now)
    outcome = Succeeded(up, held.attempt, now, "1")

    def app_connection() -> Any:
        if is_sqlite:
            return sqlite3.connect(db_url)
        import psycopg

        return psycopg.connect(db_url)

    conn = app_connection()
    try:
        if is_sqlite:
            conn.execute("BEGIN IMMEDIATE")
        assert queue.backend.complete_in(conn, outcome, "w", now)
        conn.rollback()
    finally:
        conn.close()
    assert (status(queue, up), status(queue, down)) == ("running", "waiting")
    conn = app_connection()
    try:
        if is_sqlite:
            conn.execute("BEGIN IMMEDIATE")
        assert queue.backend.complete_in(conn, outcome, "w", now)
        conn.commit()
    finally:
        conn.close()
    assert (status(queue, up), status(queue, down)) == ("succeeded", "queued")
    assert event_names(queue, down) == ["WAITING", "READY"]


def test_a_rescued_last_attempt_cancels_its_dependents(queue: errands.Queue) -> None:
    """The rescue of a lost last attempt makes the job failed: its dependents are settled in
    that transaction too (one with "run" queued, the others cancelled)."""
    from errands.backends.base import ClaimRequest

    tasks(queue)
    up = queue.enqueue("step", {}, max_attempts=1)
    cancel = queue.enqueue("collect", {}, after=[up])
    run = queue.enqueue("collect", {}, after=[up], on_upstream_failure="run")
    now = queue.clock()
    queue.backend.claim(ClaimRequest("dead", ["step"], None, 1, 1.0), now)
    report = queue.backend.rescue(now + 60)
    assert report.exhausted == [up]
    assert [status(queue, i) for i in (up, cancel, run)] == ["failed", "cancelled", "queued"]
    assert event_names(queue, run)[-1] == "READY"


def test_a_limited_dependent_keeps_its_limit(queue: errands.Queue) -> None:
    """Flow control: a dependent of a limited task is written with its limit key in the
    enqueue's transaction, as any enqueue writes it, and runs under it once released."""

    @queue.task(limit=errands.Limit("deps-test", running=1))
    def limited() -> str:
        return "ok"

    tasks(queue)
    up = queue.enqueue("step", {})
    ids = queue.enqueue_many([("limited", {}, {"after": [up]}), ("limited", {}, {"after": [up]})])
    for i in ids:
        job = queue.get(i)
        assert job is not None and (job.status, job.limit_key) == ("waiting", "deps-test")
    drain(queue)
    assert [status(queue, i) for i in ids] == ["succeeded", "succeeded"]
