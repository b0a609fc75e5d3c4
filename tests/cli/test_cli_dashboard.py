"""``errands dashboard`` and the demo's dashboard, as real processes."""

from __future__ import annotations

import json
import os
import pty
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import errands
from helpers.support import get_job
from helpers.web import populate

TOKEN = "tok-123"


def errands_cmd(*args: str) -> list[str]:
    return [sys.executable, "-W", "error", "-m", "errands", *args]


def env() -> dict[str, str]:
    return {
        k: v for k, v in os.environ.items() if k not in ("ERRANDS_DB", "ERRANDS_DASHBOARD_TOKEN")
    }


def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def post(url: str, headers: dict[str, str]) -> int:
    req = urllib.request.Request(url, data=b"{}", headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return int(r.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def started(proc: subprocess.Popen[str]) -> str:
    """The URL the dashboard printed on its first line."""
    assert proc.stdout is not None
    line = proc.stdout.readline()
    match = re.search(r"(http://\S+/)", line)
    assert match, f"no URL in {line!r} (stderr: {proc.stderr.read() if proc.stderr else ''})"
    return match.group(1)


@pytest.fixture
def serve(db_url: str) -> Iterator[Any]:
    procs: list[subprocess.Popen[str]] = []

    def start(*args: str) -> str:
        proc = subprocess.Popen(
            errands_cmd("dashboard", "--db", db_url, "--port", "0", *args),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env(),
        )
        procs.append(proc)
        return started(proc)

    yield start
    for proc in procs:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
        for stream in (proc.stdout, proc.stderr):
            if stream:
                stream.close()


def test_serves_the_api_on_loopback(db_url: str, queue: errands.Queue, serve: Any) -> None:
    ids = populate(queue)
    base = serve()
    assert base.startswith("http://127.0.0.1:")
    status, body = get(base + "api/admin/jobs?status=failed")
    assert status == 200 and sorted(j["id"] for j in body["jobs"]) == sorted(ids["failed"])
    assert get(base + "healthz") == (200, {"status": "ok"})


def test_token_and_read_only_from_the_command_line(
    db_url: str, queue: errands.Queue, serve: Any
) -> None:
    ids = populate(queue)
    base = serve("--host", "0.0.0.0", "--token", TOKEN, "--read-only")
    base = base.replace("0.0.0.0", "127.0.0.1")
    assert get(base + "api/admin/stats")[0] == 401
    auth = {"authorization": f"Bearer {TOKEN}", "content-type": "application/json"}
    assert get(base + "api/admin/stats", auth)[0] == 200
    assert post(base + f"api/admin/jobs/{ids['failed'][0]}/retry", auth) == 403
    assert get_job(queue, ids["failed"][0]).status == "failed"
    assert get(base + "healthz")[0] == 200


def test_token_from_the_environment(tmp_path: Path) -> None:
    db = str(tmp_path / "jobs.db")
    errands.Queue(db).close()
    proc = subprocess.Popen(
        errands_cmd("dashboard", "--db", db, "--port", "0", "--host", "0.0.0.0"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**env(), "ERRANDS_DASHBOARD_TOKEN": TOKEN},
    )
    try:
        base = started(proc).replace("0.0.0.0", "127.0.0.1")
        assert get(base + "api/admin/stats")[0] == 401
        assert get(base + "api/admin/stats", {"authorization": f"Bearer {TOKEN}"})[0] == 200
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
        assert proc.stdout and proc.stderr
        proc.stdout.close()
        proc.stderr.close()


def one_line_error(r: subprocess.CompletedProcess[str], code: int, needle: str) -> None:
    assert r.returncode == code, (r.returncode, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("errands:")]
    assert len(lines) == 1 and needle in lines[0], r.stderr


def test_refusals(tmp_path: Path) -> None:
    db = str(tmp_path / "jobs.db")
    errands.Queue(db).close()

    def run(*a: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            errands_cmd("dashboard", "--db", db, *a),
            capture_output=True,
            text=True,
            env=env(),
            timeout=60,
        )

    one_line_error(run("--host", "0.0.0.0"), 2, "without a token")
    one_line_error(run("--host", "192.0.2.1"), 2, "--token")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        one_line_error(run("--port", str(busy.getsockname()[1])), 1, "choose another --port")
    r = subprocess.run(
        errands_cmd("dashboard", "--db", str(tmp_path / "typo.db")),
        capture_output=True,
        text=True,
        env=env(),
        timeout=60,
    )
    one_line_error(r, 1, "no queue database at")
    assert not (tmp_path / "typo.db").exists()


def test_demo_prints_the_dashboard_url_and_ends_when_not_interactive(tmp_path: Path) -> None:
    r = subprocess.run(
        errands_cmd("demo", "--jobs", "40", "--port", "0"),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env(),
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert r.returncode == 0, r.stderr
    assert re.search(r"^Dashboard: http://127\.0\.0\.1:\d+/", r.stdout, re.MULTILINE)
    assert "dashboard stopped with the demo" in r.stdout
    r = subprocess.run(
        errands_cmd("demo", "--jobs", "40", "--no-dashboard"),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env(),
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert r.returncode == 0 and "Dashboard:" not in r.stdout


def test_demo_in_a_terminal_keeps_serving_until_ctrl_c(tmp_path: Path) -> None:
    primary, secondary = pty.openpty()
    proc = subprocess.Popen(
        errands_cmd("demo", "--jobs", "40", "--port", "0"),
        cwd=tmp_path,
        stdin=secondary,
        stdout=secondary,
        stderr=secondary,
        env=env(),
    )
    os.close(secondary)
    text = ""
    try:
        deadline = time.monotonic() + 120
        while "Press Ctrl-C" not in text:
            assert time.monotonic() < deadline and proc.poll() is None, text
            try:
                text += os.read(primary, 4096).decode(errors="replace")
            except OSError:
                break
        url = re.search(r"Dashboard: (http://\S+/)", text)
        assert url, text
        status, body = get(url.group(1) + "api/admin/jobs?status=failed")
        assert status == 200 and body["jobs"][0]["type"] == "charge_card"
        # The worker still runs: a retry from the API runs again (and fails again).
        failed = body["jobs"][0]["id"]
        headers = {"content-type": "application/json"}
        assert post(url.group(1) + f"api/admin/jobs/{failed}/retry", headers) == 200
        while get(url.group(1) + f"api/admin/jobs/{failed}")[1]["job"]["status"] != "failed":
            assert time.monotonic() < deadline
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(primary)
