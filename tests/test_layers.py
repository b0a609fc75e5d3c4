"""The import graph points down: nothing in ``errands/backends/`` imports a layer above it
(docs/architecture.md). Imports inside functions count too — they only hide the edge."""

from __future__ import annotations

import ast
from pathlib import Path

import errands

PACKAGE = Path(errands.__file__).parent
# The leaf modules every layer may use.
BELOW_BACKENDS = {"states", "records", "settings", "errors", "rollup", "faults"}
# Known upward edges, each with the change that removes it (none left).
KNOWN_UPWARD: set[tuple[str, str]] = set()


def upward_imports(text: str, depth: int) -> set[str]:
    """The errands modules outside backends/ that one backend file imports, anywhere in it;
    ``depth``: 1 for backends/x.py, 2 for backends/sql/x.py."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom) and node.level > depth:
            target = (node.module or "").split(".")[0]
            names = [target] if target else [alias.name for alias in node.names]
            found.update(n for n in names if n != "backends")
        elif isinstance(node, ast.Import):
            found.update(
                a.name.split(".")[1]
                for a in node.names
                if a.name.startswith("errands.") and not a.name.startswith("errands.backends")
            )
    return found


def test_backends_import_nothing_above_them() -> None:
    files = sorted((PACKAGE / "backends").rglob("*.py"))
    assert len(files) >= 6
    upward = set()
    for f in files:
        depth = len(f.relative_to(PACKAGE).parts) - 1
        for module in upward_imports(f.read_text(), depth) - BELOW_BACKENDS:
            upward.add((str(f.relative_to(PACKAGE)), module))
    assert upward <= KNOWN_UPWARD


def test_the_check_sees_upward_imports() -> None:
    text = (
        "from .base import Backend\n"
        "from ..errors import DatabaseError\n"
        "import errands.queue\n"
        "def f():\n"
        "    from ..worker import Worker\n"
        "    from .. import periodic\n"
    )
    assert upward_imports(text, 1) == {"errors", "queue", "worker", "periodic"}
    assert upward_imports("from ..base import Backend\n", 2) == set()  # sql/ → backends/
