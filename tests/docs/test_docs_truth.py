"""What the README and docs/ state about behaviour, checked against the code (as
tests/docs/test_docs.py does for the state diagram): each statement a newcomer acts on."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import errands
from errands.backends.sqlite import path_from_url
from helpers.ops import enqueue
from helpers.support import EPOCH

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
DOCS = {p.name: p.read_text() for p in (ROOT / "docs").glob("*.md")}
ONE_LINE = re.compile(r"\s+")


def flat(text: str) -> str:
    return ONE_LINE.sub(" ", text)


# -- the ERRANDS_DB rule, stated the same everywhere --------------------------------------

RULE = "errands.Queue()` with no URL reads `$ERRANDS_DB`"


def test_the_errands_db_rule_is_stated_in_the_api_page_postgres_and_recipes() -> None:
    assert RULE in flat(DOCS["python.md"])
    assert RULE in flat(DOCS["postgres.md"])
    assert RULE in flat(DOCS["recipes.md"])
    # and nowhere is the old statement that the worker ignores it
    for name, text in [("README.md", README), *DOCS.items()]:
        assert "is not read by the worker" not in flat(text), name


def test_the_worker_refusal_is_stated_where_the_cut_over_happens() -> None:
    cut_over = flat(DOCS["postgres.md"]).split("### Cut-over procedure", 1)[1]
    assert "refuses to start (exit 2)" in cut_over and "names both databases" in cut_over
    assert "refuses to start (exit 2)" in flat(DOCS["cli.md"])


def test_sqlite_url_slashes_are_documented_as_they_parse() -> None:
    text = flat(DOCS["python.md"])
    assert "`sqlite:///relative/app.db` — three slashes, relative" in text
    assert "`sqlite:////abs/app.db` — four slashes, absolute" in text
    assert path_from_url("sqlite:///relative/app.db") == "relative/app.db"
    assert path_from_url("sqlite:////abs/app.db") == "/abs/app.db"
    # docs/ show no three-slash URL meant as an absolute path
    for name, text in [("README.md", README), *DOCS.items()]:
        assert not re.search(r"sqlite:///(?:abs|/?var|/?srv|/?home|/?tmp)/", text), name


# -- states.md: CANCELLED:BY_USER is queued and running cancels -----------------------------


def test_cancelled_by_user_covers_queued_and_running_as_the_docs_say(q: errands.Queue) -> None:
    for name in ("states.md", "operations.md"):
        (row,) = [ln for ln in DOCS[name].splitlines() if ln.startswith("| `CANCELLED:BY_USER`")]
        assert "queued job" in row and "running one" in row, name
    queued = enqueue(q, "t", at=EPOCH)
    assert q.cancel(queued) == "cancelled"
    job = q.get(queued)
    assert job is not None and job.error_code == "CANCELLED:BY_USER"


# -- Getting started: what errands[web] installs -----------------------------------------


def test_getting_started_names_what_the_web_extra_installs() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    names = [re.split(r"[<>=\[ ]", req)[0].lower() for req in extras["web"]]
    text = flat(DOCS["getting-started.md"]).lower()
    spoken = {"prometheus-client": "prometheus_client"}
    for name in names:
        assert spoken.get(name, name) in text, name
    assert "only used for `prometheus_client`" not in text


def test_frameworks_are_dev_only() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    deps = " ".join(project["dependencies"]).lower()
    dev = " ".join(project["optional-dependencies"]["dev"]).lower()
    for framework in ("django", "fastapi", "flask"):
        assert framework not in deps and f"{framework}>=" in dev
    make = (ROOT / "Makefile").read_text()
    assert re.search(r"pip install .*-e '\.\[dev,[^']*\]'", make)  # CI installs them


# -- maintenance leadership is per service --------------------------------------------------


def test_docs_describe_leadership_per_service_as_the_code_elects(db_url: str) -> None:
    for name, text in [("README.md", README), *DOCS.items()]:
        t = flat(text)
        assert "one elected leader" not in t and "`maintenance` row" not in t, name
        assert "one maintenance leader" not in t, name
    assert "per service" in flat(DOCS["postgres.md"])
    assert "runs on its own elected worker" in flat(DOCS["runtime.md"])
    with errands.Queue(db_url) as q:
        q.periodic(every=60, name="tick")(lambda: None)
        names = {s.name for s in q.services()}
        for name in names:
            assert q.backend.try_lead(name, "w1", 30, q.clock())
        # one lease per service: another worker can hold a different one
        assert names == {"rescue", "deps", "expiry", "periodic", "prune", "wal"}


# -- runtime.md: its figures are dated measurements with the command that prints them ---------


def test_runtime_figures_are_dated_with_the_command() -> None:
    text = flat(DOCS["runtime.md"])
    for test_file in ("tests/runtime/test_chaos.py", "tests/runtime/test_wakeup.py"):
        m = re.search(rf"Measured on (\d{{4}}-\d\d-\d\d)[^|]*?{re.escape(test_file)}", text)
        assert m, test_file
        assert (ROOT / test_file).exists()
    assert "not something the suite reproduces exactly" in text


# -- docs/cli.md: the worker log lines and the commands' exit statuses ---------------------------


def test_the_cli_page_lists_the_worker_log_options_the_cli_has(tmp_path: Path) -> None:
    help_text = subprocess.run(
        [sys.executable, "-m", "errands", "worker", "--help"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    ).stdout
    for option in ("--quiet", "--verbose", "--log-format"):
        assert option in help_text and option in DOCS["cli.md"]
    assert "--log-format json" in DOCS["cli.md"] and "{text,json}" in help_text


# -- operations.md: the dashboard serves /metrics, as the docs now say ------------------------


def test_the_dashboard_serves_the_metrics_operations_md_describes(q: errands.Queue) -> None:
    from prometheus_client.parser import text_string_to_metric_families
    from starlette.testclient import TestClient

    from errands.metrics import render_metrics
    from errands.web import create_app

    text = flat(DOCS["operations.md"])
    assert "is not built yet" not in text
    assert "The dashboard serves it at `/metrics`" in text
    enqueue(q, "t", at=EPOCH)
    served = TestClient(create_app(q)).get("/metrics")
    assert served.status_code == 200
    names = {f.name for f in text_string_to_metric_families(served.text)}
    assert names == {f.name for f in text_string_to_metric_families(render_metrics(q).decode())}
    assert "errands_jobs_in_state" in names


# -- docs/postgres.md: numbers in payloads through jsonb ----------------------------------

EXACT = [0, -7, 2**63 - 1, -(2**63), 0.1, 1.0, 1e-07, 123456.789, 9007199254740993.0, 1e15]
# What PostgreSQL's jsonb gives back instead (SQLite keeps the JSON text: exact).
CHANGED_ON_POSTGRES = [(1e16, 10**16), (1.5e300, 15 * 10**299), (-0.0, 0.0)]


def test_numbers_round_trip_as_postgres_md_says(db_url: str) -> None:
    doc = flat(DOCS["postgres.md"])
    assert "a float of magnitude 1e16 or more" in doc and "And `-0.0` comes back as `0.0`" in doc
    sent = EXACT + [value for value, _ in CHANGED_ON_POSTGRES]
    with errands.Queue(db_url) as q:
        job = q.get(q.enqueue("numbers", {"n": sent}))
        assert job is not None
        back = job.payload["n"]
    on_postgres = db_url.startswith("postgresql")
    expected = EXACT + [pg if on_postgres else value for value, pg in CHANGED_ON_POSTGRES]
    assert back == expected
    # Equal is not enough: the type (int or float) and the sign of zero must be as stated.
    assert [type(v) for v in back] == [type(v) for v in expected]
    assert str(back[-1]) == ("0.0" if on_postgres else "-0.0")
