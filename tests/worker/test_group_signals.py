"""Signals as systemd and a terminal send them (issue #8 §4): a SIGTERM or SIGINT to the
whole process group of `errands worker --processes 2` is as graceful as one to the
supervisor alone; only a second signal to the supervisor stops at once. Real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import errands
from helpers.support import wait_for

APP = textwrap.dedent(
    """
    import os, time
    from pathlib import Path
    import errands

    q = errands.Queue(os.environ["APP_DB"], lease_seconds=30, shutdown_timeout=60)

    @q.task(max_attempts=1)
    def nap(seconds: float) -> int:
        Path(os.environ["STARTED"]).write_text(str(os.getpid()))
        time.sleep(seconds)
        return os.getpid()
    """
)


def _start(tmp_path: Path, db_url: str) -> subprocess.Popen[str]:
    (tmp_path / "sig_app.py").write_text(APP)
    with (tmp_path / "supervisor.err").open("w") as err:  # a file: a pipe could fill up
        return subprocess.Popen(
            [sys.executable, "-m", "errands", "worker", "--app", "sig_app", "--processes", "2"],
            cwd=tmp_path,
            env={**os.environ, "APP_DB": db_url, "STARTED": str(tmp_path / "started")},
            stdout=subprocess.DEVNULL,
            stderr=err,
            text=True,
            # Its own process group, as under a terminal or a service manager: killpg below
            # then reaches the supervisor and both children, and never pytest.
            start_new_session=True,
        )


def _running(q: errands.Queue, job_id: int, tmp_path: Path) -> None:
    wait_for(lambda: (tmp_path / "started").exists(), timeout=60, what="the handler to start")
    job = q.get(job_id)
    assert job is not None and job.status == "running"


def _finish(proc: subprocess.Popen[str], timeout: float = 90) -> int:
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_to_the_whole_process_group_is_graceful(
    tmp_path: Path, db_url: str, sig: signal.Signals
) -> None:
    with errands.Queue(db_url) as q:
        job_id = q.enqueue("nap", {"seconds": 1.5})
        sup = _start(tmp_path, db_url)
        try:
            _running(q, job_id, tmp_path)
            os.killpg(sup.pid, sig)  # every process gets it: supervisor and children alike
            code = _finish(sup)
        finally:
            if sup.poll() is None:
                os.killpg(sup.pid, signal.SIGKILL)
                sup.wait()
        job = q.get(job_id)
        attempts = [a.status for a in q.attempts(job_id)]
        err = (tmp_path / "supervisor.err").read_text()
    assert code == 0, err
    assert job is not None and job.status == "succeeded", err
    assert attempts == ["succeeded"]
    assert "stopping now" not in err and "Traceback" not in err


def test_a_second_signal_to_the_supervisor_still_stops_at_once(tmp_path: Path, db_url: str) -> None:
    with errands.Queue(db_url) as q:
        # Far longer than the bound below: a graceful stop would wait for it.
        job_id = q.enqueue("nap", {"seconds": 600})
        sup = _start(tmp_path, db_url)
        try:
            _running(q, job_id, tmp_path)
            os.killpg(sup.pid, signal.SIGTERM)  # graceful, everywhere
            # Two signals that arrive before the handler runs merge into one (the kernel
            # keeps one pending signal per kind): wait until the supervisor acted on the first.
            wait_for(
                lambda: (
                    "stopping 2 worker process(es) gracefully"
                    in (tmp_path / "supervisor.err").read_text()
                ),
                timeout=30,
                what="the supervisor to begin its graceful stop",
            )
            sup.send_signal(signal.SIGTERM)  # a person insists
            code = _finish(sup, timeout=60)
        finally:
            if sup.poll() is None:
                os.killpg(sup.pid, signal.SIGKILL)
                sup.wait()
        job = q.get(job_id)
    assert code == 1
    # Stopped without waiting for the handler: the lease will recover the job.
    assert job is not None and job.status == "running"
