"""After ``errands graduate`` the SQLite file is marked and refuses new work (issue #21, item
2); graduate refuses while a worker is alive on the source; ``check`` on a graduated file
says so; a failed verification says what to do. The mark itself works on both backends."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import errands
from errands.backends.base import WorkerInfo
from errands.cli import main
from errands.cli.graduate.copy import graduate
from helpers.support import get_job

Make = Callable[..., errands.Queue]


def _source(path: str) -> None:
    with errands.Queue(path) as q:

        @q.periodic(every=60, grace=60)
        def tick() -> None: ...

        q.enqueue("tick", {})


def _with_password(pg_url: str) -> str:
    # The test server trusts local connections: the password is never checked, only shown.
    return pg_url.replace("postgresql://postgres@", "postgresql://postgres:s3cret@", 1)


def _graduate(path: str, pg_url: str, *extra: str) -> int:
    return main(["--db", path, "graduate", "--to", pg_url, *extra])


def test_a_graduated_file_refuses_new_work_naming_where_it_went(
    tmp_path: Path, pg_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = str(tmp_path / "app.db")
    _source(path)
    target = _with_password(pg_url)
    assert _graduate(path, target) == 0
    capsys.readouterr()
    with errands.Queue(path) as q:
        with pytest.raises(errands.GraduatedError) as refused:
            q.enqueue("tick", {})
        message = str(refused.value)
        assert "s3cret" not in message and "graduated to postgresql://postgres:***@" in message
        assert "errands reopen" in message and "\n" not in message
        with pytest.raises(errands.GraduatedError):
            q.run_worker(burst=True)
    # The CLI's enqueue says the same in one line, exit 1.
    assert main(["--db", path, "enqueue", "tick"]) == 1
    err = capsys.readouterr().err
    assert "graduated to" in err and "s3cret" not in err
    # check says so, and reports no overdue schedule of a queue that runs elsewhere now.
    assert main(["--db", path, "check"]) == 1
    out = capsys.readouterr().out
    assert "graduated to" in out and "overdue" not in out
    # Reopened deliberately, it takes work again.
    assert main(["--db", path, "reopen"]) == 0
    assert "reopened" in capsys.readouterr().out
    with errands.Queue(path) as q:
        assert get_job(q, q.enqueue("tick", {})).status == "queued"


def test_graduate_refuses_while_a_worker_is_alive_on_the_source(
    tmp_path: Path, pg_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = str(tmp_path / "app.db")
    _source(path)
    with errands.Queue(path) as q:
        info = WorkerInfo("web-1.4711.ab", "web-1", 4711, None, 4, types=["tick"])
        q.backend.register_worker(info, time.time())
    assert _graduate(path, pg_url) == 1
    err = capsys.readouterr().err
    assert "web-1.4711.ab" in err and "kill -TERM 4711" in err and "--ignore-live-workers" in err
    with errands.Queue(pg_url) as target:  # nothing was copied
        assert target.jobs() == []
    assert _graduate(path, pg_url, "--ignore-live-workers") == 0
    capsys.readouterr()


def test_a_second_run_that_finds_mismatches_says_what_to_do(
    tmp_path: Path, pg_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = str(tmp_path / "app.db")
    _source(path)
    assert not graduate(path, pg_url, max_batches=1).complete  # an interrupted copy
    # A forgotten process changed the source after the copy (by hand here).
    conn = sqlite3.connect(path)
    conn.execute("UPDATE jobs SET priority = 7")
    conn.commit()
    conn.close()
    assert _graduate(path, pg_url) == 1
    out = capsys.readouterr().out
    assert "MISMATCH" in out and "Stop every worker" in out and "empty the target" in out


def _cut_over(path: str, pg_url: str) -> int:
    """Graduate, then let the queue live on PostgreSQL: its job runs there, a new one too."""
    assert _graduate(path, pg_url) == 0
    with errands.Queue(pg_url) as q:

        @q.task
        def tick() -> None: ...

        q.enqueue("tick", {})
        q.run_worker(burst=True, concurrency=1)
        return len(q.jobs())


def _rerun_after_cut_over(
    tmp_path: Path, pg_url: str, capsys: pytest.CaptureFixture[str], *, reopen: bool
) -> tuple[str, str, int]:
    """Graduate, run the queue on PostgreSQL, (reopen the file,) graduate again: its output
    and the target's job count before the rerun."""
    path = str(tmp_path / "app.db")
    _source(path)
    jobs = _cut_over(path, pg_url)
    if reopen:  # the file's mark is gone, the target's record of the move stays
        assert main(["--db", path, "reopen"]) == 0
    capsys.readouterr()
    assert _graduate(path, pg_url) == 1
    out, err = capsys.readouterr()
    return out, err, jobs


def test_rerunning_graduate_after_the_cut_over_says_the_move_is_done(
    tmp_path: Path, pg_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    out, err, jobs = _rerun_after_cut_over(tmp_path, pg_url, capsys, reopen=False)
    assert "already graduated to postgresql://" in err and "the move is done" in err
    assert "the queue lives there now" in err and "Nothing was copied" in err
    assert "empty the target" not in out + err and "drop" not in out + err
    with errands.Queue(pg_url) as q:
        assert len(q.jobs()) == jobs and all(j.status == "succeeded" for j in q.jobs())


def test_a_rerun_into_the_target_the_queue_moved_to_never_advises_emptying_it(
    tmp_path: Path, pg_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    out, _, jobs = _rerun_after_cut_over(tmp_path, pg_url, capsys, reopen=True)
    assert "verification FAILED" in out and "Do NOT empty it" in out
    assert "finished a graduation from this file before" in out
    assert "drop and create" not in out and "empty the target" not in out
    with errands.Queue(pg_url) as q:
        assert len(q.jobs()) == jobs


def test_a_marked_database_refuses_work_until_reopened(make_queue: Make) -> None:
    q = make_queue()
    q.backend.mark_graduated("postgresql://app:***@db.internal/app", q.clock())
    marked = make_queue()

    @marked.task
    def t() -> None: ...

    with pytest.raises(errands.GraduatedError, match=r"db\.internal"):
        marked.enqueue("t", {})
    with pytest.raises(errands.GraduatedError):
        marked.enqueue_many([("t", {})])
    with pytest.raises(errands.GraduatedError):
        marked.run_worker(burst=True)
    allowed = make_queue(allow_graduated=True)
    assert get_job(allowed, allowed.enqueue("t", {})).status == "queued"
    assert q.backend.reopen() is True and q.backend.graduation() is None
    reopened = make_queue()
    reopened.enqueue("t", {})


def test_check_json_on_a_graduated_file(
    make_queue: Make, db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    q = make_queue()
    q.backend.mark_graduated("postgresql://app@db.internal/app", q.clock())
    assert main(["--db", db_url, "check", "--json"]) == 1
    (problem,) = json.loads(capsys.readouterr().out)["problems"]
    assert problem.startswith("this queue was graduated to postgresql://app@db.internal/app")


APP = """
import errands

q = errands.Queue()  # $ERRANDS_DB


@q.task
def t() -> None: ...
"""


@pytest.mark.parametrize("processes", ["1", "2"])
def test_errands_worker_on_a_marked_database_exits_at_once(
    make_queue: Make, db_url: str, tmp_path: Path, processes: str
) -> None:
    q = make_queue()
    q.backend.mark_graduated("postgresql://app@db.internal/app", q.clock())
    (tmp_path / "app.py").write_text(APP)
    env = {**os.environ, "ERRANDS_DB": db_url, "PYTHONPATH": str(tmp_path)}
    argv = ["worker", "--app", "app", "--burst", "--processes", processes]
    proc = subprocess.run(
        [sys.executable, "-m", "errands", *argv],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert "graduated to postgresql://app@db.internal/app" in line and "errands reopen" in line


def test_a_producer_open_before_the_graduation_refuses_within_the_watch_time(
    make_queue: Make,
) -> None:
    from errands.client.declared import TTL, GraduationWatch

    web = make_queue()  # opened before the graduation, as a long-running web process is
    ticks = [0.0]
    refused: list[str] = []
    watch = GraduationWatch(
        web.backend.graduation,
        lambda g: refused.append(g.target),
        initial=web.backend.graduation(),
        monotonic=lambda: ticks[0],
    )
    watch()
    other = make_queue()
    other.backend.mark_graduated("postgresql://app@db.internal/app", other.clock())
    ticks[0] = TTL - 1
    watch()
    assert refused == []  # not read again yet: no read per enqueue
    ticks[0] = TTL
    watch()
    assert refused == ["postgresql://app@db.internal/app"]


def test_jobs_taken_during_the_copy_are_added_by_reopen_and_a_rerun(
    tmp_path: Path, pg_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # docs/postgres.md, jobs enqueued meanwhile: before anything ran on PostgreSQL.
    path = str(tmp_path / "app.db")
    _source(path)
    assert _graduate(path, pg_url) == 0
    assert main(["--db", path, "reopen"]) == 0
    with errands.Queue(path) as q:
        late = q.enqueue("tick", {})  # (stands for a job committed while the copy ran)
    capsys.readouterr()
    assert _graduate(path, pg_url) == 0
    assert "verified" in capsys.readouterr().out
    with errands.Queue(pg_url) as q:
        assert get_job(q, late).status == "queued"
