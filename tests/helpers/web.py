"""Shared builders for the dashboard tests: a queue with real jobs run by a real worker."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

import errands
from helpers.support import sql_rows

# Debian's chromium, launched by path (Playwright's own download needs the internet).
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--headless",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def _need(what: str) -> None:
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"{what} is missing; CI must have it (.ci/run installs chromium)")
    pytest.skip(f"{what} is missing")


def launch_chromium() -> Iterator[Any]:
    """A Playwright browser on the system chromium (for a module-scoped fixture); with CI=true
    a missing chromium or Playwright fails, elsewhere it skips."""
    if not os.path.exists(CHROMIUM):
        _need(f"{CHROMIUM} (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _need("playwright (pip install -e '.[dev]')")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def snapshot(url: str) -> list[Any]:
    """Every job's state, the size of the audit log, the pauses and the stored limits: equal
    before and after means nothing was written."""
    return [
        sql_rows(url, "SELECT id, status, attempts, run_at FROM jobs ORDER BY id"),
        sql_rows(url, "SELECT COUNT(*) FROM job_events"),
        sql_rows(url, "SELECT COUNT(*) FROM job_attempts"),
        sql_rows(url, "SELECT queue, reason FROM queue_pauses ORDER BY queue"),
        sql_rows(url, "SELECT * FROM flow_limits ORDER BY key"),
    ]


def populate(q: errands.Queue) -> dict[str, Any]:
    """Five succeeded jobs, three failed (``PAY:DECLINED``, one attempt each), two queued an
    hour ahead in queue ``mail``; run by a burst worker."""

    @q.task(max_attempts=1)
    def charge(n: int) -> None:
        raise errands.JobError("PAY:DECLINED", f"card {n} declined", retry=False)

    @q.task
    def resize(n: int) -> dict[str, int]:
        return {"n": n}

    @q.task(queue="mail")
    def remind(n: int) -> None:
        return None

    ok = [resize.enqueue(n=i) for i in range(5)]
    failed = [charge.enqueue(n=i) for i in range(3)]
    q.run_worker(burst=True, concurrency=2, handle_signals=False)
    queued = [q.enqueue("remind", {"n": i}, delay=3600) for i in range(2)]
    return {"ok": ok, "failed": failed, "queued": queued}


@contextmanager
def served(db_url: str, token: str | None = None) -> Iterator[str]:
    """``errands dashboard`` as a subprocess on a free loopback port."""
    errands.Queue(db_url).close()
    port = free_port()
    env = dict(os.environ)
    env.pop("ERRANDS_DASHBOARD_TOKEN", None)
    env.pop("ERRANDS_DASHBOARD_TOKENS", None)
    if token:
        env["ERRANDS_DASHBOARD_TOKEN"] = token
    proc = subprocess.Popen(
        [sys.executable, "-m", "errands", "dashboard", "--db", db_url, "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    base = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(base + "healthz", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                out = proc.stdout.read() if proc.stdout else ""
                pytest.fail(f"errands dashboard did not start: {out}")
            time.sleep(0.1)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        if proc.stdout:
            proc.stdout.close()
