"""MkDocs hooks (mkdocs.yml ``hooks:``): the reference pages that are generated from the code,
so that they cannot drift from it.

- ``<!-- errands:cli -->`` in a page becomes every ``errands`` command, its usage line and a
  table of its options, read from the argparse parsers ``errands --help`` prints.
- ``<!-- errands:python -->`` becomes one mkdocstrings ``::: errands.NAME`` per public name
  (``errands.__all__``): the Queue and its records first, the rest in order, the exceptions
  last.
- ``<!-- errands:schema -->`` becomes the ``CREATE`` statements of a freshly migrated SQLite
  queue: the public tables as the code creates them today.

``tests/docs/test_site.py`` renders both and checks that every option has help text.
"""

from __future__ import annotations

import argparse
import html
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

CLI_MARKER = "<!-- errands:cli -->"
PYTHON_MARKER = "<!-- errands:python -->"
FIRST = ("Queue", "Task", "JobContext", "Job", "Attempt", "EventRecord")  # the reference's head
SCHEMA_MARKER = "<!-- errands:schema -->"
OPENAPI_MARKER = "<!-- errands:openapi -->"


def _cell(text: str) -> str:
    """Text for a Markdown table cell: one line, ``|`` and HTML escaped."""
    return html.escape(" ".join(text.split()), quote=False).replace("|", "\\|")


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser]]:
    found: list[tuple[str, argparse.ArgumentParser]] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.append((name, sub))
    return found


def commands(
    parser: argparse.ArgumentParser, prefix: str = "errands"
) -> list[tuple[str, argparse.ArgumentParser]]:
    """Every command line, depth first: ``errands``, ``errands worker``, ``errands limit set``…"""
    found = [(prefix, parser)]
    for name, sub in _subcommands(parser):
        found.extend(commands(sub, f"{prefix} {name}"))
    return found


def options(parser: argparse.ArgumentParser) -> list[tuple[str, str]]:
    """(how it is written, its help with defaults expanded) for each argument but --help."""
    formatter: Any = parser._get_formatter()
    rows = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
            continue
        if action.help == argparse.SUPPRESS:
            continue
        if action.option_strings:
            metavar = (
                formatter._format_args(action, action.dest.upper()) if action.nargs != 0 else ""
            )
            written = ", ".join(f"{flag} {metavar}".strip() for flag in action.option_strings)
        else:
            written = formatter._format_args(action, action.dest)
        rows.append((written, formatter._expand_help(action) if action.help else ""))
    return rows


def render_cli(parser: argparse.ArgumentParser) -> str:
    out = []
    for line, sub in commands(parser):
        depth = min(line.count(" ") + 2, 4)
        out.append(f"{'#' * depth} `{line}`\n")
        if sub.description:
            out.append(" ".join(sub.description.split()) + "\n")
        out.append("```text\n" + sub.format_usage().strip() + "\n```\n")
        rows = options(sub)
        if rows:
            out.append("| argument | meaning |\n|---|---|")
            out.extend(f"| `{_cell(w)}` | {_cell(h)} |" for w, h in rows)
            out.append("")
        if sub.epilog:
            out.append(" ".join(sub.epilog.split()) + "\n")
    return "\n".join(out)


def render_schema() -> str:
    import errands

    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "schema.db")
        errands.Queue(path).close()
        conn = sqlite3.connect(path)
        try:
            rows = conn.execute(
                "SELECT name, sql FROM sqlite_master WHERE type = 'table' AND sql IS NOT NULL "
                "AND name NOT LIKE 'sqlite_%' ORDER BY name"
            ).fetchall()
        finally:
            conn.close()
    return "\n".join(f"### `{name}`\n\n```sql\n{sql};\n```\n" for name, sql in rows)


def render_python() -> str:
    import errands

    names = [n for n in errands.__all__ if n != "__version__"]
    errors = [n for n in names if isinstance(getattr(errands, n), type)]
    errors = [n for n in errors if issubclass(getattr(errands, n), BaseException)]
    first = [n for n in FIRST if n in names]
    api = first + [n for n in names if n not in errors and n not in first]
    out = [f"::: errands.{n}\n" for n in api]
    out.append("## Exceptions\n")
    out.extend(f"::: errands.{n}\n" for n in errors)
    return "\n".join(out)


def openapi_document() -> dict[str, Any]:
    """The admin API's OpenAPI document, as ``GET /api/openapi.json`` serves it."""
    from errands import __version__
    from errands.web import app, openapi

    return openapi.document(app.ROUTES, title="errands", version=__version__)


def render_openapi() -> str:
    """Every operation of the OpenAPI document: method, path, summary."""
    rows = ["| method | path | what it does |", "|---|---|---|"]
    for path, operations in openapi_document()["paths"].items():
        for method, op in operations.items():
            rows.append(f"| `{method.upper()}` | `{path}` | {_cell(op.get('summary', ''))} |")
    return "\n".join(rows) + "\n"


def on_post_build(config: Any, **_: Any) -> None:
    """The whole document beside the page, for client generators: reference/openapi.json."""
    import json

    target = Path(config["site_dir"]) / "reference" / "openapi.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(openapi_document(), indent=2))


def on_page_markdown(markdown: str, **_: Any) -> str:
    if CLI_MARKER in markdown:
        from errands.cli import build_parser

        markdown = markdown.replace(CLI_MARKER, render_cli(build_parser()))
    if PYTHON_MARKER in markdown:
        markdown = markdown.replace(PYTHON_MARKER, render_python())
    if SCHEMA_MARKER in markdown:
        markdown = markdown.replace(SCHEMA_MARKER, render_schema())
    if OPENAPI_MARKER in markdown:
        markdown = markdown.replace(OPENAPI_MARKER, render_openapi())
    return markdown
