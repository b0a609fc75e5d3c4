"""First steps (issue #21, item 5): a worker creates no queue file by accident, the slashes of a
SQLite URL are explained both ways, every duration flag reads `1h`, and the demo's own
commands run its jobs. Through the real ``errands`` command on real files and PostgreSQL."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import textwrap
import tomllib
import uuid
from pathlib import Path

import pytest

import errands
from errands.cli import build_parser
from errands.cli.common import duration
from helpers.support import run_cli as run

APP = """
import errands

q = errands.Queue()


@q.task
def fine() -> str:
    return "ok"
"""


def last_error(r: subprocess.CompletedProcess[str], code: int) -> str:
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    line = r.stderr.strip().splitlines()[-1]
    assert line.startswith("errands: "), r.stderr
    return line


@pytest.fixture
def app_dir(tmp_path: Path) -> Path:
    (tmp_path / "tasks.py").write_text(textwrap.dedent(APP))
    return tmp_path


def listing(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir() if p.name != "__pycache__")


# -- a worker creates no queue file by accident ----------------------------------------------


@pytest.mark.parametrize("how", ["env", "option"])
def test_worker_refuses_a_missing_file_it_was_pointed_at(app_dir: Path, how: str) -> None:
    args = ["worker", "--app", "tasks", "--burst"]
    if how == "env":
        r = run(app_dir, *args, env={"ERRANDS_DB": "missing.db"})
        where = "(from $ERRANDS_DB)"
    else:
        r = run(app_dir, *args, "--db", "missing.db")
        where = "(from --db)"
    line = last_error(r, 1)
    assert f"no queue database at missing.db {where}" in line
    assert "--create" in line
    assert listing(app_dir) == ["tasks.py"]  # nothing created, the app not even imported


def test_four_slashes_meant_relative_are_refused_with_the_three_slash_url(
    app_dir: Path,
) -> None:
    # `sqlite:////app.db` meant as app.db here: it names /app.db at the filesystem root.
    folder = f"errands-test-{uuid.uuid4().hex[:12]}"
    (app_dir / folder).mkdir()
    errands.Queue(str(app_dir / folder / "app.db")).close()
    url = f"sqlite:////{folder}/app.db"
    for args in (["worker", "--app", "tasks", "--burst"], ["jobs"]):
        line = last_error(run(app_dir, *args, env={"ERRANDS_DB": url}), 1)
        assert f"sqlite:////{folder}/app.db is the absolute path /{folder}/app.db" in line
        assert f"write sqlite:///{folder}/app.db (three slashes)" in line
    assert not Path("/" + folder).exists()
    # the URL the message gives works
    r = run(app_dir, "worker", "--app", "tasks", "--burst", env={"ERRANDS_DB": url[:9] + url[10:]})
    assert r.returncode == 0, r.stderr


def test_worker_create_makes_the_file_and_says_so(app_dir: Path) -> None:
    r = run(
        app_dir, "worker", "--app", "tasks", "--burst", "--create", env={"ERRANDS_DB": "new.db"}
    )
    assert r.returncode == 0, r.stderr
    assert f"created a new, empty queue database at {app_dir / 'new.db'}" in r.stderr
    with errands.Queue(str(app_dir / "new.db")) as q:
        assert q.jobs() == []
    # once it exists, no --create is needed and nothing is said about creating
    r = run(app_dir, "worker", "--app", "tasks", "--burst", env={"ERRANDS_DB": "new.db"})
    assert r.returncode == 0 and "created" not in r.stderr, r.stderr


def test_worker_warns_when_the_default_file_is_new(app_dir: Path) -> None:
    # Neither --db nor $ERRANDS_DB: the app's Queue() makes errands.db here. Say it loudly.
    r = run(app_dir, "worker", "--app", "tasks", "--burst")
    assert r.returncode == 0, r.stderr
    warning = (
        f"errands worker: WARNING: the Queue of tasks created a new, empty queue database at "
        f"{app_dir / 'errands.db'}"
    )
    assert warning in r.stderr
    r = run(app_dir, "worker", "--app", "tasks", "--burst")
    assert r.returncode == 0 and "WARNING" not in r.stderr, r.stderr


def test_worker_on_postgres_is_not_held_to_the_file_rule(db_url: str, app_dir: Path) -> None:
    with errands.Queue(db_url) as q:
        job_id = q.enqueue("fine", {})
    r = run(app_dir, "worker", "--app", "tasks", "--burst", env={"ERRANDS_DB": db_url})
    assert r.returncode == 0 and "created" not in r.stderr, r.stderr
    with errands.Queue(db_url) as q:
        job = q.get(job_id)
        assert job is not None and job.status == "succeeded"


# -- one duration parser -------------------------------------------------------------------


def _options(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.Action]]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += [(f"{name} {opt}", a) for opt, a in _options(sub)]
        elif action.option_strings:
            found.append((action.option_strings[0], action))
    return found


def test_every_duration_flag_reads_units() -> None:
    flags = {
        name: action
        for name, action in _options(build_parser())
        if any(
            w in name.split()[-1]
            for w in ("delay", "window", "since", "wait", "grace", "seconds", "pause")
        )
    }
    assert {
        "enqueue --delay",
        "stats --window",
        "errors --since",
        "check --max-wait",
        "check --lease-grace",
        "check --max-pause",
        "bench --idle-seconds",
    } <= set(flags)
    for name, action in flags.items():
        assert action.type is duration, name
    assert duration("1h") == 3600 and duration("30m") == 1800 and duration("7d") == 7 * 86400
    assert duration("1.5") == 1.5 and duration("2w") == 14 * 86400


def test_enqueue_delay_takes_a_duration(db_url: str, tmp_path: Path) -> None:
    with errands.Queue(db_url):
        pass
    r = run(tmp_path, "--db", db_url, "enqueue", "report", "--delay", "1h")
    assert r.returncode == 0, r.stderr
    with errands.Queue(db_url) as q:
        job = q.get(int(r.stdout))
        assert job is not None and job.run_at is not None and job.created_at is not None
        assert abs((job.run_at - job.created_at).total_seconds() - 3600) < 1
    line = last_error(run(tmp_path, "--db", db_url, "enqueue", "report", "--delay", "1x"), 2)
    assert "not a duration" in line and "30m" in line


# -- the demo's commands run the demo's jobs --------------------------------------------------


def test_the_demo_prints_commands_that_run_a_retried_job(tmp_path: Path) -> None:
    r = run(tmp_path, "demo", "--no-dashboard", "--jobs", "20")
    assert r.returncode == 0, r.stderr
    explore = r.stdout.split("Explore further:", 1)[1].splitlines()
    (retry,) = [ln for ln in explore if " retry " in ln]
    (worker,) = [ln for ln in explore if " worker --app " in ln]
    assert "errands.cli.demo:queue" in worker  # the module's own name, wherever it lives
    job_id = int(retry.split()[-1])
    env = {k: v for k, v in os.environ.items() if k != "ERRANDS_DB"}
    for line in (retry, worker):
        command = line.split("#", 1)[0]
        done = subprocess.run(
            command, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, (command, done.stderr)
    with errands.Queue(str(tmp_path / "errands-demo.db")) as q:
        job = q.get(job_id)
        assert job is not None and job.status == "failed"  # it ran again (and failed again)
        assert len(q.attempts(job_id)) == 4  # three in the demo, one after the retry
    check = run(tmp_path, "--db", "errands-demo.db", "periodic")
    assert check.stdout.strip() == "no periodic schedules"  # the worker did not bring it back


def test_the_demo_queue_refuses_to_create_a_file(tmp_path: Path) -> None:
    line = last_error(run(tmp_path, "worker", "--app", "errands.cli.demo:queue", "--burst"), 1)
    assert "no demo database at errands-demo.db; run `errands demo` first" in line
    assert listing(tmp_path) == []


# -- the first queue (README, docs/getting-started.md) runs as written --------------------------

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
GETTING_STARTED = (ROOT / "docs" / "getting-started.md").read_text()


def section(text: str, heading: str) -> str:
    return text.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]


def first_queue_section() -> str:
    return section(GETTING_STARTED, "Your first queue in your own project")


def test_the_readme_opens_with_the_commands_then_the_first_queue() -> None:
    assert README.index("make demo") < README.index("## A first queue") < README.index("## What")
    assert "docs/getting-started.md" in section(README, "A first queue")


@pytest.mark.parametrize(
    "where", ["README.md", "docs/getting-started.md"], ids=["readme", "getting-started"]
)
def test_the_first_queue_runs_as_written(tmp_path: Path, where: str) -> None:
    if where == "README.md":
        text = section(README, "A first queue")
    else:
        text = first_queue_section()
    (code,) = re.findall(r"```python\n(.*?)```", text, re.S)
    assert code.startswith("# tasks.py\n")
    (tmp_path / "tasks.py").write_text(code)
    (console,) = re.findall(r"```console\n(.*?)```", text, re.S)
    bin_dir = os.path.dirname(sys.executable)  # `python` and `errands` of this environment
    env = {k: v for k, v in os.environ.items() if k != "ERRANDS_DB"}
    env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
    steps: list[tuple[str, list[str]]] = []
    for line in console.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        else:
            steps[-1][1].append(line)
    assert len(steps) == 4
    for command, expected in steps:
        if command.startswith("export "):
            key, _, value = command[len("export ") :].partition("=")
            env[key] = value
            continue
        done = subprocess.run(
            command, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, (command, done.stderr)
        if expected:
            assert done.stdout.splitlines() == expected, command
    with errands.Queue(str(tmp_path / "app.db")) as q:
        job = q.get(1)
        assert job is not None and (job.status, job.result) == ("succeeded", "welcomed user 42")


def test_the_install_commands_name_the_wheel_make_dist_builds() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wheel = f"errands-{project['version']}-py3-none-any.whl"
    docs = [README, GETTING_STARTED, (ROOT / "docs" / "recipes.md").read_text()]
    named = set(re.findall(r"errands-[\w.]+-py3-none-any\.whl", "\n".join(docs)))
    assert named == {wheel}
    assert "make dist" in section(GETTING_STARTED, "Install")
    makefile = (ROOT / "Makefile").read_text()
    (recipe,) = re.findall(r"^dist:.*\n((?:\t.*\n)+)", makefile, re.M)
    assert "-m build --outdir dist" in recipe  # sdist and wheel, into dist/
    assert any(dep.startswith("build") for dep in project["optional-dependencies"]["dev"])


def test_every_command_is_in_the_reference_and_named_in_the_readme() -> None:
    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    commands = set(sub.choices)
    reference = (ROOT / "docs" / "cli.md").read_text()
    first_cells = [
        ln.split(" | ")[0] for ln in reference.splitlines() if ln.startswith("| `errands")
    ]
    rows = {name for cell in first_cells for name in re.findall(r"`errands ([\w-]+)", cell)}
    assert rows == commands
    (listed,) = re.findall(r"^The commands: (.*?)\.$", README, re.M | re.S)
    assert set(re.findall(r"`([\w-]+)`", listed)) == commands
    assert "docs/reference/cli.md" in README and "| command | what it does |" not in README
