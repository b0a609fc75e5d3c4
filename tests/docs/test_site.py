"""The documentation site (mkdocs.yml, `make docs`): its references are generated from the
code, so what they cannot show — a public name without a docstring, a command line option
without help text — fails here instead of leaving a hole in the site."""

from __future__ import annotations

import importlib.util
import inspect
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import errands
from errands.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def hooks() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mkdocs_hooks", ROOT / "scripts/mkdocs_hooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PUBLIC = [name for name in errands.__all__ if name != "__version__"]


def _doc(obj: Any) -> str:
    return (inspect.getdoc(obj) or "").strip()


@pytest.mark.parametrize("name", PUBLIC)
def test_every_public_name_and_its_public_members_have_a_docstring(name: str) -> None:
    obj = getattr(errands, name)
    assert _doc(obj), f"errands.{name} has no docstring: the API reference would be empty"
    if not inspect.isclass(obj):
        return
    for member in dir(obj):
        if member.startswith("_"):
            continue
        value = inspect.getattr_static(obj, member)
        if isinstance(value, staticmethod | classmethod):
            value = value.__func__
        if not (inspect.isfunction(value) or isinstance(value, property)):
            continue
        inherited = getattr(BaseException, member, None)
        assert _doc(value) and _doc(value) != _doc(inherited), f"errands.{name}.{member}"


def test_the_python_reference_lists_every_public_name() -> None:
    h = hooks()
    page = (DOCS / "reference" / "python.md").read_text()
    assert h.PYTHON_MARKER in page
    listed = re.findall(r"^::: errands\.(\w+)$", h.on_page_markdown(page), re.M)
    assert sorted(listed) == sorted(PUBLIC)


def test_every_command_and_option_has_help_text() -> None:
    h = hooks()
    missing = []
    for line, parser in h.commands(build_parser()):
        if not (parser.description or "").strip():
            missing.append(line)
        missing.extend(f"{line} {written}" for written, text in h.options(parser) if not text)
    assert missing == [], "no help text: " + ", ".join(missing)


def test_the_cli_reference_renders_every_command_and_option() -> None:
    h = hooks()
    parser = build_parser()
    page = (DOCS / "reference" / "cli.md").read_text()
    assert h.CLI_MARKER in page
    rendered = h.on_page_markdown(page)
    for line, sub in h.commands(parser):
        assert f"`{line}`\n" in rendered, line
        for written, _ in h.options(sub):
            assert f"`{h._cell(written)}`" in rendered, (line, written)
    assert "errands worker" in rendered and "--log-format" in rendered


def test_the_schema_page_shows_every_table_the_migrations_create() -> None:
    from errands.backends import sql

    h = hooks()
    page = (DOCS / "reference" / "schema.md").read_text()
    assert h.SCHEMA_MARKER in page
    rendered = h.on_page_markdown(page)
    created = {
        name
        for _, script in sql.migrations("sqlite")
        for name in re.findall(r"CREATE TABLE (?:IF NOT EXISTS )?(\w+)", script)
    }
    shown = set(re.findall(r"^### `(\w+)`$", rendered, re.M))
    assert created <= shown | _dropped_tables()
    assert {"jobs", "job_attempts", "job_events", "workers", "periodic"} <= shown


def _dropped_tables() -> set[str]:
    """Tables a later migration drops, or renames (a table rebuilt as x_new, renamed to x)."""
    from errands.backends import sql

    gone = r"DROP TABLE (?:IF EXISTS )?(\w+)|ALTER TABLE (\w+) RENAME TO"
    found = [
        m.group(1) or m.group(2)
        for _, script in sql.migrations("sqlite")
        for m in re.finditer(gone, script)
    ]
    return set(found)


def test_every_page_is_in_the_nav_and_every_nav_entry_is_a_page() -> None:
    # `make docs` fails on the same (validation: omitted_files), but only where it runs; this
    # names the page in the quick loop. The YAML tag on one line is mkdocs', not plain YAML.
    text = (ROOT / "mkdocs.yml").read_text()
    nav = text.split("\nnav:\n", 1)[1]
    listed = re.findall(r":\s+([\w/.-]+\.md)\s*$", nav, re.M)
    pages = sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md"))
    assert sorted(listed) == pages


def test_the_settings_page_lists_every_queue_setting() -> None:
    page = (DOCS / "reference" / "settings.md").read_text()
    rows = set(re.findall(r"^\| `(\w+)` \|", page, re.M))
    params = inspect.signature(errands.Queue.__init__).parameters.values()
    settings = {p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY}
    assert rows == settings


def _first_python_block(page: str) -> str:
    text = (DOCS / page).read_text()
    found = re.search(r"```python\n(.*?)```", text, re.S)
    assert found is not None, page
    return found.group(1)


def test_the_home_page_example_runs(db_url: str) -> None:
    code = _first_python_block("index.md").replace('"app.db"', repr(db_url))
    namespace: dict[str, Any] = {}
    exec(compile(code, "docs/index.md", "exec"), namespace)
    with namespace["q"] as q:
        (job,) = q.jobs()
        assert (job.type, job.payload, job.status) == ("send_welcome", {"user_id": 42}, "queued")
        assert job.max_attempts == 5


def test_the_worked_example_of_the_python_page_prints_what_it_says(
    db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = _first_python_block("python.md").replace('"app.db"', repr(db_url))
    exec(compile(code, "docs/python.md", "exec"), {"__name__": "__main__"})
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "succeeded 1 {'sent_to': 'a@example.com'}"
    assert lines[1] == "EMAIL:BAD_ADDRESS"
    assert [line.split()[-2] for line in lines[2:]] == ["ENQUEUED", "CLAIMED", "FAILED"]


@pytest.mark.parametrize("page", ["README.md", "docs/benchmarks.md"])
def test_the_benchmark_figures_are_the_lab_notebooks(page: str) -> None:
    """Every figure in a table of the README's comparison and of the benchmarks summary is
    one BENCHMARKS.md recorded (the notebook is the source; these pages only quote it)."""
    text = (ROOT / page).read_text()
    if page == "README.md":
        text = text.split("## How it compares", 1)[1].split("\n## ", 1)[0]
    notebook = (ROOT / "BENCHMARKS.md").read_text()
    rows = [line for line in text.splitlines() if line.startswith("|")]
    figures = {f for row in rows for f in re.findall(r"\b\d{1,3}(?:,\d{3})+\b|\b\d+\.\d+\b", row)}
    assert figures, page
    missing = sorted(f for f in figures if not re.search(rf"(?<![\d,.]){re.escape(f)}\b", notebook))
    assert missing == [], f"{page}: not in BENCHMARKS.md: {missing}"


def test_the_http_page_names_only_routes_the_app_serves(tmp_path: Path) -> None:
    from errands.web import create_app

    page = (DOCS / "reference" / "http.md").read_text()
    named = set(re.findall(r"`(?:GET |POST )?(/[\w/{}]+)`", page))
    with errands.Queue(str(tmp_path / "jobs.db")) as q:
        served = {getattr(route, "path", "") for route in create_app(q).routes}
    served = {
        re.sub(r"\{(\w+):\w+\}", r"{\1}", path).replace("{job_id}", "{id}") for path in served
    }
    assert named and named <= served, named - served
