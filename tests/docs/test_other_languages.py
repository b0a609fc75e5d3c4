"""docs/from-other-languages.md runs: each example block (after ``<!-- example: NAME -->``) is
run as written on each backend — the shell one-liners by ``sh``, the Node ones by ``node``
with the drivers of examples/node/package.json, the outbox triggers by the database — with
``app.db`` and the example PostgreSQL URL turned into the test's database; a Python worker then
runs the job and its result is read back.

Without ``psql``, ``sqlite3``, ``node`` or examples/node's packages (``npm ci`` there) a test
skips saying which; in CI (``CI=true``, .ci/run installs them all) it fails instead.
"""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import errands
from helpers.interop import app_transaction
from helpers.support import is_sqlite, run_cli, sql_rows

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "from-other-languages.md"
NODE_DIR = ROOT / "examples" / "node"
EXAMPLE = re.compile(r"<!-- example: ([^>]*?) -->\n```(\w+)\n(.*?)```", re.S)
EXAMPLE_URL = "postgresql://app@localhost/app"
TIMEOUT = 120  # a bound for a hung command, never a performance assertion


def examples() -> dict[str, str]:
    found = {name: code for name, _, code in EXAMPLE.findall(PAGE.read_text())}
    assert found, "no examples in docs/from-other-languages.md"
    return found


def for_test(code: str, db_url: str) -> str:
    return code.replace(EXAMPLE_URL, db_url).replace("app.db", db_url)


# The Debian package of each program (.ci/run installs the same).
PACKAGES = {"sqlite3": "sqlite3", "psql": "postgresql-client", "node": "nodejs"}


def needed(program: str) -> str:
    """The program's path, or a skip naming it (a failure in CI, where .ci/run installs it)."""
    path = shutil.which(program)
    if path is None:
        missing(f"{program} is not installed (Debian: apt-get install {PACKAGES[program]})")
    return str(path)


def missing(why: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{why}; in CI it must run (.ci/run installs it)")
    pytest.skip(why)


def run(args: list[str], **kwargs: Any) -> str:
    done = subprocess.run(args, capture_output=True, text=True, timeout=TIMEOUT, **kwargs)
    assert done.returncode == 0, f"{args[0]} failed: {done.stderr}"
    return str(done.stdout)


def sent(q: errands.Queue, job_id: int) -> errands.Job:
    """The example's job, run by a Python worker; the job as read back."""

    @q.task()
    def send_email(to: str) -> str:
        return f"sent to {to}"

    q.run_worker(burst=True)
    return q.wait(job_id, timeout=30)


def test_every_example_has_a_test() -> None:
    assert sorted(examples()) == sorted(
        ["psql", "sqlite3", "node postgres", "node sqlite", "outbox postgres", "outbox sqlite"]
    )


APP = """
import errands

q = errands.Queue({url!r})


@q.task()
def send_email(to: str) -> str:
    return f"sent to {{to}}"
"""


def test_the_shell_one_liner_enqueues_and_a_worker_process_runs_it(
    db_url: str, make_queue: Callable[..., errands.Queue], tmp_path: Path
) -> None:
    q = make_queue()  # the schema, as an application's first Queue makes it
    name = "sqlite3" if is_sqlite(db_url) else "psql"
    needed(name)
    out = run(["sh", "-c", for_test(examples()[name], db_url)])
    job_id = int(out.split()[-1])
    # A real worker process, as in production: `errands worker --app mailapp --burst`.
    (tmp_path / "mailapp.py").write_text(APP.format(url=db_url))
    done = run_cli(tmp_path, "worker", "--app", "mailapp", "--burst")
    assert done.returncode == 0, done.stderr
    job = q.wait(job_id, timeout=30)
    assert (job.status, job.result, job.payload) == (
        "succeeded",
        "sent to a@example.com",
        {"to": "a@example.com"},
    )
    assert job.priority == (0 if is_sqlite(db_url) else 5)
    assert [e.actor for e in q.events(job.id)][:1] == ["sql"]


def test_the_node_example_enqueues_and_a_python_worker_runs_it(
    db_url: str, make_queue: Callable[..., errands.Queue], tmp_path: Path
) -> None:
    q = make_queue()
    node = needed("node")
    driver = "better-sqlite3" if is_sqlite(db_url) else "pg"
    if not (NODE_DIR / "node_modules" / driver).is_dir():
        missing(f"examples/node has no {driver} installed (run: npm ci --prefix examples/node)")
    script = tmp_path / "example.js"
    name = "node sqlite" if is_sqlite(db_url) else "node postgres"
    script.write_text(for_test(examples()[name], db_url))
    env = {**os.environ, "NODE_PATH": str(NODE_DIR / "node_modules")}
    out = run([node, str(script)], env=env)
    job = sent(q, int(out.split()[-1]))
    assert (job.status, job.result) == ("succeeded", "sent to a@example.com")


def test_the_outbox_trigger_enqueues_with_the_apps_transaction_or_not_at_all(
    db_url: str, make_queue: Callable[..., errands.Queue]
) -> None:
    q = make_queue()
    if is_sqlite(db_url):
        conn = sqlite3.connect(db_url)
        conn.executescript(examples()["outbox sqlite"])
        conn.close()
    else:
        app_transaction(db_url, [examples()["outbox postgres"]], commit=True)
    app_transaction(db_url, ["INSERT INTO orders (item) VALUES ('lost')"], commit=False)
    assert sql_rows(db_url, "SELECT count(*) FROM jobs") == [(0,)]
    assert sql_rows(db_url, "SELECT count(*) FROM job_events") == [(0,)]
    app_transaction(db_url, ["INSERT INTO orders (item) VALUES ('book')"], commit=True)
    ((order,),) = sql_rows(db_url, "SELECT id FROM orders")
    ((job_id,),) = sql_rows(db_url, "SELECT id FROM jobs")
    assert [(e.event, e.actor) for e in q.events(job_id)] == [("ENQUEUED", "orders")]

    shipped: list[dict[str, Any]] = []

    @q.task()
    def ship(order: int, item: str) -> str:
        shipped.append({"order": order, "item": item})
        return f"shipped {item}"

    q.run_worker(burst=True)
    assert shipped == [{"order": order, "item": "book"}]
    assert q.wait(job_id, timeout=30).result == "shipped book"
