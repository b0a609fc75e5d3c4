"""The code's comments and docstrings point at things a reader of the repository has: a file
they name exists, a dotted ``errands`` name they give imports, and they cite the docs pages
(docs/…), not a contract document kept outside the repository."""

from __future__ import annotations

import ast
import importlib
import io
import re
import tokenize
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCANNED = sorted(
    [*ROOT.glob("src/**/*.py"), *ROOT.glob("src/**/*.sql"), *ROOT.glob("tests/**/*.py")]
)
OUTSIDE = "SP" + "EC"  # the name of the contract kept outside the repository
FILE = re.compile(r"(?<![\w./-])((?:[\w-]+/)*\w+\.(?:py|sql|md|toml|yml))\b")
DOTTED = re.compile(r"(?<![\w.])errands(?:\.[A-Za-z_]\w*)+")
# The default database file; the span attributes ``errands.job.*`` (errands/otel.py).
NOT_MODULES = {"errands.db", "errands.job"}
# A module, not a file (``psycopg.sql``); the pattern of a migration's file name.
NOT_FILES = {"psycopg.sql", "migration_NNNN.sql"}


def remarks(path: Path) -> Iterator[tuple[int, str]]:
    """(line, text) of every comment and docstring of one file."""
    text = path.read_text()
    if path.suffix == ".sql":
        for n, line in enumerate(text.splitlines(), 1):
            if "--" in line:
                yield n, line.split("--", 1)[1]
        return
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string
    tree = ast.parse(text)
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            doc = ast.get_docstring(node, clean=False)
            if doc and node.body:
                yield node.body[0].lineno, doc


@cache
def all_files() -> tuple[str, ...]:
    skip = {".venv", ".git", "site", "node_modules", ".mypy_cache", ".ruff_cache"}
    return tuple(
        "/" + str(p.relative_to(ROOT))
        for p in ROOT.rglob("*")
        if p.is_file() and not skip & set(p.relative_to(ROOT).parts)
    )


def file_exists(name: str) -> bool:
    """A path is a real file if some file of the repository ends with it (``backends/deps.py``
    from src/errands, ``docs/pipelines.md`` from the root, ``conftest.py`` anywhere)."""
    return any(f.endswith("/" + name) for f in all_files())


@cache
def imports(dotted: str) -> bool:
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def problems(path: Path, shown_as: str) -> list[str]:
    found = []
    for line, text in remarks(path):
        where = f"{shown_as}:{line}"
        if OUTSIDE in text:
            found.append(f"{where}: cites {OUTSIDE}; cite the docs page that states it")
        for name in FILE.findall(text):
            if name not in NOT_FILES and not file_exists(name):
                found.append(f"{where}: names {name}, which is not in the repository")
        for dotted in DOTTED.findall(text):
            dotted = dotted.rstrip(".")
            if dotted not in NOT_MODULES and not imports(dotted):
                found.append(f"{where}: names {dotted}, which does not import")
    return found


@pytest.mark.parametrize("folder", ["src", "tests"])
def test_comments_name_only_what_exists(folder: str) -> None:
    found = [
        problem
        for path in SCANNED
        if path.parts[len(ROOT.parts)] == folder
        for problem in problems(path, str(path.relative_to(ROOT)))
    ]
    assert found == [], "\n".join(found)


def test_the_check_catches_what_it_is_for(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        f'"""As {OUTSIDE} §4 says, see worker_db.py."""\n'
        "# errands.declared holds it; errands.client.declared does; docs/concepts.md too\n"
    )
    found = problems(sample, "sample.py")
    assert len(found) == 3, found
    assert any("worker_db.py" in p for p in found)
    assert any("errands.declared," in p for p in found)


def test_the_docs_cite_no_outside_contract() -> None:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    citing = [str(p.relative_to(ROOT)) for p in pages if f"{OUTSIDE} §" in p.read_text()]
    assert citing == []
