"""`errands worker --processes P`: the supervisor keeps P real worker processes running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import errands
from helpers.support import get_job, wait_for

APP = textwrap.dedent(
    """
    import os, time
    import errands

    q = errands.Queue(os.environ["APP_DB"], lease_seconds=5, heartbeat_seconds=1)

    @q.task(timeout=0.5, max_attempts=3, backoff=errands.fixed(0))
    def stuck_once(ctx, n: int) -> int:
        if ctx.attempt == 1:
            time.sleep(120)  # a sync handler no thread can interrupt
        return os.getpid()

    @q.task
    def whoami(n: int) -> int:
        time.sleep(0.05)
        return os.getpid()
    """
)


def _supervisor(tmp_path: Path, db_url: str) -> subprocess.Popen[str]:
    (tmp_path / "sup_app.py").write_text(APP)
    with (tmp_path / "supervisor.err").open("w") as err:  # a file: a pipe could fill up
        return subprocess.Popen(
            [sys.executable, "-m", "errands", "worker", "--app", "sup_app", "--processes", "2"],
            cwd=tmp_path,
            env={**os.environ, "APP_DB": db_url},
            stdout=subprocess.DEVNULL,
            stderr=err,
            text=True,
        )


def _log(tmp_path: Path) -> str:
    return (tmp_path / "supervisor.err").read_text()


def _stop(proc: subprocess.Popen[str], tmp_path: Path) -> tuple[int, str]:
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    return proc.returncode, _log(tmp_path)


def test_a_sync_handler_past_its_timeout_is_killed_with_its_process(
    tmp_path: Path, db_url: str
) -> None:
    with errands.Queue(db_url) as q:
        job_id = q.enqueue("stuck_once", {"n": 1})
        sup = _supervisor(tmp_path, db_url)
        try:
            job = wait_for(
                lambda: (j := q.get(job_id)) is not None and j.status == "succeeded" and j,
                timeout=60,
                what="the job to succeed after its first attempt timed out",
            )
            # The process whose thread is stuck exits and is replaced.
            wait_for(lambda: "recycled" in _log(tmp_path), timeout=60, what="a recycle")
        finally:
            code, err = _stop(sup, tmp_path)
        attempts = q.attempts(job_id)
    assert [a.error_code for a in attempts] == ["TIMEOUT:JOB", None]
    assert job.attempts == 2
    assert code == 0, err


def test_a_killed_worker_process_is_restarted(tmp_path: Path, db_url: str) -> None:
    with errands.Queue(db_url) as q:
        sup = _supervisor(tmp_path, db_url)
        try:
            first = q.enqueue("whoami", {"n": 1})
            pid = wait_for(lambda: (j := q.get(first)) and j.result, timeout=60, what="a worker")
            os.kill(pid, signal.SIGKILL)
            wait_for(lambda: "restarting" in _log(tmp_path), timeout=30, what="a restart")
            ids = [q.enqueue("whoami", {"n": i}) for i in range(20)]
            pids = wait_for(
                lambda: (
                    all((j := q.get(i)) and j.status == "succeeded" for i in ids)
                    and {get_job(q, i).result for i in ids}
                ),
                timeout=60,
                what="jobs after the kill",
            )
        finally:
            code, err = _stop(sup, tmp_path)
    assert pid not in pids
    assert "exited with -9" in err and "restarting" in err
    assert code == 0, err
