"""docs/getting-started.md, run as a newcomer would, on both backends: the task module as
written, the quick check, then the two terminals — a real `errands worker` process that runs
until stopped, the producer's commands, and `errands dashboard` showing the job and the worker.
The page's `export ERRANDS_DB=app.db` is pointed at this test's database; the dashboard is
given a free port instead of 8000 (tests run side by side)."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

from helpers.support import wait_for

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "getting-started.md").read_text()


def section(heading: str) -> str:
    return PAGE.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]


def consoles(text: str) -> list[list[tuple[str, list[str]]]]:
    """Each console block as (command, expected output lines), comments stripped."""
    blocks = []
    for block in re.findall(r"```console\n(.*?)```", text, re.S):
        steps: list[tuple[str, list[str]]] = []
        for line in block.splitlines():
            if line.startswith("$ "):
                steps.append((line[2:].split("  #")[0].strip(), []))
            else:
                steps[-1][1].append(line)
        blocks.append(steps)
    return blocks


def newcomer_env(db_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "ERRANDS_DB"}
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env["ERRANDS_DB"] = db_url
    return env


def run(command: str, cwd: Path, env: dict[str, str]) -> str:
    if command.startswith("export "):
        assert command == "export ERRANDS_DB=app.db"  # what the test points at its database
        return ""
    done = subprocess.run(command, shell=True, cwd=cwd, env=env, capture_output=True, text=True)
    assert done.returncode == 0, (command, done.stderr)
    return done.stdout


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def test_the_newcomer_path_runs_as_written(tmp_path: Path, db_url: str) -> None:
    first = section("Your first queue in your own project")
    (code,) = re.findall(r"```python\n(.*?)```", first, re.S)
    (tmp_path / "tasks.py").write_text(code)
    env = newcomer_env(db_url)

    (quick,) = consoles(first)
    for command, expected in quick:
        out = run(command, tmp_path, env)
        assert not expected or out.splitlines() == expected, command

    terminal_1, terminal_2 = consoles(section("Two terminals: a worker, and your application"))
    assert [c for c, _ in terminal_1] == ["export ERRANDS_DB=app.db", "errands worker --app tasks"]
    worker = subprocess.Popen(
        shlex.split(terminal_1[1][0]),
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    dashboard: subprocess.Popen[str] | None = None
    try:
        export, enqueue, show, serve = terminal_2
        run(export[0], tmp_path, env)
        assert run(enqueue[0], tmp_path, env).splitlines() == enqueue[1] == ["2"]

        def shown() -> Any:
            job = json.loads(run(show[0], tmp_path, env))["job"]
            return job if job["status"] == "succeeded" else None

        job = wait_for(shown, what="the worker of terminal 1 to run job 2")
        assert job["result"] == "welcomed user 7"  # as the page's comment says

        assert serve[0] == "errands dashboard"
        dashboard = subprocess.Popen(
            [*shlex.split(serve[0]), "--port", "0"],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert dashboard.stdout is not None
        url = re.search(r"(http://127\.0\.0\.1:\d+/)", dashboard.stdout.readline())
        assert url, "the dashboard printed no URL on 127.0.0.1"
        with urllib.request.urlopen(url.group(1), timeout=10) as r:
            assert r.status == 200
        stats = get_json(url.group(1) + "api/admin/stats")
        assert stats["counts"]["succeeded"] == 2
        assert len(stats["workers"]) == 1  # the worker of terminal 1, live
        assert get_json(url.group(1) + "api/admin/jobs/2")["job"]["result"] == "welcomed user 7"
    finally:
        stderr = {}
        for name, proc in (("dashboard", dashboard), ("worker", worker)):
            if proc is not None:
                proc.send_signal(signal.SIGINT)  # Ctrl-C, as the page says
                stderr[name] = proc.communicate(timeout=60)[1]  # and closes its pipes
    assert worker.returncode == 0, stderr["worker"]
    assert dashboard is not None and dashboard.returncode == 0, stderr["dashboard"]
