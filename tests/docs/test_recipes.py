"""docs/recipes.md runs: each ``# file: PATH`` code block is written out and exercised here,
against the real Django, FastAPI and Flask (subprocesses, so each app has a fresh interpreter),
real SQLite files and a real PostgreSQL, and real worker processes stopped with SIGTERM."""

from __future__ import annotations

import configparser
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import errands
from helpers.support import wait_for

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "recipes.md"
BLOCK = re.compile(r"```[a-z]*\n# file: (\S+)\n(.*?)```", re.S)
TIMEOUT = 120  # a bound for a hung process, never a performance assertion
DEFAULT_SHUTDOWN = errands.Queue.__init__.__kwdefaults__["shutdown_timeout"]  # type: ignore[index]


def blocks() -> dict[str, str]:
    found: dict[str, str] = {}
    for name, body in BLOCK.findall(DOC.read_text()):
        assert name not in found, f"two blocks write {name}"
        found[name] = body
    return found


def write(tmp: Path, *names: str) -> None:
    files = blocks()
    for name in names:
        path = tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(files[name])


def env_for(tmp: Path, **extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if k not in ("ERRANDS_DB", "PGDATABASE")}
    return {**base, "PYTHONPATH": str(tmp), **extra}


def python(tmp: Path, code: str, env: dict[str, str]) -> Any:
    """Run ``code`` in a fresh interpreter in ``tmp``; it prints one JSON value last."""
    r = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=tmp,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def errands_cli(tmp: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(
        [sys.executable, "-m", "errands", *args],
        cwd=tmp,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert r.returncode == 0, (args, r.stdout, r.stderr)
    return r


def test_every_recipe_file_is_exercised() -> None:
    assert set(blocks()) == {
        "mysite/settings.py",
        "mysite/__init__.py",
        "shop/__init__.py",
        "shop/models.py",
        "shop/jobs.py",
        "shop/services.py",
        "errands_app.py",
        "tasks.py",
        "api.py",
        "reports.py",
        "webapp/__init__.py",
        "errands-worker.service",
        "Dockerfile",
        "compose.yaml",
    }


# -- Django ---------------------------------------------------------------------------------

DJANGO_FILES = (
    "mysite/settings.py",
    "mysite/__init__.py",
    "shop/__init__.py",
    "shop/models.py",
    "shop/jobs.py",
    "shop/services.py",
    "errands_app.py",
)

DJANGO_ORDERS = """
    import json
    import django
    django.setup()
    from django.db import transaction
    from shop.jobs import q
    from shop.models import Order
    from shop.services import place_order

    kept = place_order("a@example.com", 1200)
    try:
        with transaction.atomic():  # the caller's transaction rolls back: both vanish
            place_order("b@example.com", 99)
            raise RuntimeError("payment refused")
    except RuntimeError:
        pass
    jobs = [(j.type, j.payload, j.queue) for j in q.jobs()]
    print(json.dumps({"kept": kept, "orders": Order.objects.count(), "jobs": jobs}))
"""

DJANGO_CHECK = """
    import json
    import errands_app
    from shop.models import Order
    job = errands_app.q.jobs()[0]
    print(json.dumps([job.status, job.result, Order.objects.get().receipt_sent]))
"""


def django_commands() -> list[list[str]]:
    """The recipe's `$ python -m django …` lines, as written (comments dropped)."""
    section = DOC.read_text().split("## Django", 1)[1].split("\n## ", 1)[0]
    lines = re.findall(r"^\$ (python -m django .*)$", section, re.M)
    return [shlex.split(line, comments=True) for line in lines]


def _django(tmp: Path, env: dict[str, str]) -> None:
    pytest.importorskip("django")
    write(tmp, *DJANGO_FILES)
    commands = django_commands()
    assert [c[3] for c in commands] == ["makemigrations", "migrate"]
    for command in commands:  # the setup the recipe tells, run as written
        r = subprocess.run(
            [sys.executable, *command[1:]],
            cwd=tmp,
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
        assert r.returncode == 0, (command, r.stdout, r.stderr)
    env = {**env, "DJANGO_SETTINGS_MODULE": "mysite.settings"}
    out = python(tmp, DJANGO_ORDERS, env)
    assert out["orders"] == 1
    assert out["jobs"] == [["send_receipt", {"order_id": out["kept"]}, "emails"]]
    errands_cli(tmp, env, "worker", "--app", "errands_app", "--burst", "--quiet")
    assert python(tmp, DJANGO_CHECK, env) == ["succeeded", {"sent_to": "a@example.com"}, True]


def test_django_on_the_same_sqlite_file(tmp_path: Path) -> None:
    _django(tmp_path, env_for(tmp_path))
    # One file holds both: Django's table and errands' jobs.
    assert (tmp_path / "app.db").exists() and not (tmp_path / "errands.db").exists()


def test_django_on_postgresql_through_its_psycopg_connection(tmp_path: Path, pg_url: str) -> None:
    from psycopg.conninfo import conninfo_to_dict

    info = conninfo_to_dict(pg_url)
    env = env_for(
        tmp_path,
        PGDATABASE=str(info["dbname"]),
        PGUSER=str(info.get("user") or "postgres"),
        PGHOST=str(info.get("host") or "127.0.0.1"),
        PGPORT=str(info.get("port") or "5432"),
    )
    env.pop("PGPASSWORD", None)
    _django(tmp_path, env)
    assert not (tmp_path / "app.db").exists()


# -- FastAPI --------------------------------------------------------------------------------

FASTAPI_CLIENT = """
    import json
    from fastapi.testclient import TestClient
    import api
    with TestClient(api.app) as client:  # runs the lifespan: the Queue opens
        r = client.post("/signup", params={"email": "a@example.com"})
        queue = api.app.state.queue
        assert r.status_code == 200, r.text
    # the lifespan closed it on shutdown: no connection is left open
    print(json.dumps({"job_id": r.json()["job_id"], "url": queue.url}))
"""


def test_fastapi_enqueues_in_a_request_with_a_lifespan_queue(tmp_path: Path) -> None:
    pytest.importorskip("fastapi")
    write(tmp_path, "tasks.py", "api.py")
    env = env_for(tmp_path, ERRANDS_DB="app.db")
    # The worker starts first (as the recipe's console shows): it declares the task's queue,
    # which the web process's enqueue by name then uses.
    worker = ("worker", "--app", "tasks", "--queues", "emails", "--burst", "--quiet")
    errands_cli(tmp_path, env, *worker, "--create")
    out = python(tmp_path, FASTAPI_CLIENT, env)
    assert out["url"] == "app.db"
    errands_cli(tmp_path, env, *worker)
    shown = json.loads(errands_cli(tmp_path, env, "show", str(out["job_id"]), "--json").stdout)
    assert shown["job"]["status"] == "succeeded"
    assert shown["job"]["queue"] == "emails"
    assert shown["job"]["result"] == {"sent_to": "a@example.com"}


# -- Flask ----------------------------------------------------------------------------------

FLASK_CLIENT = """
    import json
    from webapp import create_app
    app = create_app()
    r = app.test_client().post("/reports", json={"month": "2026-11"})
    assert r.status_code == 202, r.data
    app.extensions["errands"].close()
    print(json.dumps(r.get_json()))
"""


def test_flask_app_factory_enqueues_and_the_worker_runs_it(tmp_path: Path) -> None:
    pytest.importorskip("flask")
    write(tmp_path, "reports.py", "webapp/__init__.py")
    env = env_for(tmp_path, ERRANDS_DB="app.db")
    job_id = python(tmp_path, FLASK_CLIENT, env)["job_id"]
    errands_cli(tmp_path, env, "worker", "--app", "reports", "--burst", "--quiet")
    shown = json.loads(errands_cli(tmp_path, env, "show", str(job_id), "--json").stdout)
    assert (shown["job"]["status"], shown["job"]["result"]) == (
        "succeeded",
        {"month": "2026-11", "rows": 0},
    )


# -- systemd and Docker: the settings, then the command they run, stopped as they stop it ----

MYAPP_JOBS = """
import pathlib
import time

import errands

q = errands.Queue()


@q.task
def slow(marker: str) -> str:
    pathlib.Path(marker).write_text("started")
    time.sleep(1.0)
    return "finished"
"""


def _seconds(text: str) -> float:
    m = re.fullmatch(r"(\d+)(s?)", text.strip())
    assert m, f"not a plain number of seconds: {text!r}"
    return float(m.group(1))


def _graceful_stop(tmp: Path, argv: list[str], env: dict[str, str], stop_signal: str) -> None:
    """Run the worker command a unit or image runs, with a job in flight, and stop it the way
    the process manager does: the job finishes, nothing is left running, exit 0."""
    assert argv[:3] == ["errands", "worker", "--app"], argv
    (tmp / "myapp").mkdir(exist_ok=True)
    (tmp / "myapp" / "__init__.py").write_text("")
    (tmp / "myapp" / "jobs.py").write_text(MYAPP_JOBS)
    db = env["ERRANDS_DB"]
    marker = tmp / "started"
    with errands.Queue(db) as q:
        job_id = q.enqueue("slow", {"marker": str(marker)})
    proc = subprocess.Popen(
        [sys.executable, "-m", "errands", *argv[1:]],
        cwd=tmp,
        env={**env, "PYTHONPATH": str(tmp)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(marker.exists, timeout=60, what="the job to start")
        proc.send_signal(getattr(signal, stop_signal))
        _, err = proc.communicate(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    with errands.Queue(db) as q:
        job = q.get(job_id)
        assert job is not None and (job.status, job.result) == ("succeeded", "finished")


def test_systemd_unit_stops_the_worker_gracefully(tmp_path: Path) -> None:
    unit = configparser.ConfigParser(interpolation=None, strict=False)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read_string(blocks()["errands-worker.service"])
    service = unit["Service"]
    assert service["KillSignal"] == "SIGTERM"
    assert service["KillMode"] == "mixed"  # only the main process gets SIGTERM
    assert _seconds(service["TimeoutStopSec"]) > DEFAULT_SHUTDOWN
    assert service["Restart"] in ("on-failure", "always")
    key, _, value = service["Environment"].partition("=")
    assert key == "ERRANDS_DB" and value
    argv = shlex.split(service["ExecStart"])
    assert argv[0].endswith("/errands")
    env = env_for(tmp_path, ERRANDS_DB=str(tmp_path / "app.db"))
    _graceful_stop(tmp_path, ["errands", *argv[1:]], env, service["KillSignal"])


def test_dockerfile_and_compose_stop_the_worker_gracefully(tmp_path: Path) -> None:
    files = blocks()
    lines = [ln.strip() for ln in files["Dockerfile"].splitlines() if ln.strip()]
    stop = [ln.split()[1] for ln in lines if ln.startswith("STOPSIGNAL ")]
    assert stop == ["SIGTERM"]
    (cmd,) = [ln[len("CMD ") :] for ln in lines if ln.startswith("CMD ")]
    argv = json.loads(cmd)  # exec form: the worker is PID 1 and receives the signal
    compose = files["compose.yaml"]
    grace = re.search(r"^\s*stop_grace_period:\s*(\S+)\s*$", compose, re.M)
    assert grace and _seconds(grace.group(1)) > DEFAULT_SHUTDOWN
    assert re.search(r"^\s*ERRANDS_DB:\s*postgresql://", compose, re.M)
    env = env_for(tmp_path, ERRANDS_DB=str(tmp_path / "app.db"))
    _graceful_stop(tmp_path, argv, env, stop[0])
