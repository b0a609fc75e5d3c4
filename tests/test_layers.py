"""The import graph of ``src/errands`` follows the folders (docs/architecture.md):

- ``core/`` (the vocabulary) imports only ``core/`` and ``errors``, and nothing that does I/O;
- ``backends/`` imports only ``backends/``, ``core/`` and ``errors``;
- nothing imports ``cli/`` or ``web/`` from outside them, except their entry points (the console
  script for ``cli/``; ``cli/`` for ``web/``: ``errands dashboard`` and ``errands demo`` serve it);
- no import cycle anywhere.

Every import counts: inside functions and under ``TYPE_CHECKING`` too — they only hide the edge.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import errands

PACKAGE = Path(errands.__file__).parent
# Modules allowed to import cli/ or web/: the console entry point.
ENTRY_POINTS = {"errands.__main__"}
# What core/ must never import: it is the vocabulary every layer shares, with no I/O.
IO_MODULES = {"sqlite3", "psycopg", "psycopg_pool", "socket", "subprocess", "threading"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports(name: str, path: Path, known: set[str]) -> Iterator[str]:
    """The modules ``name`` imports, anywhere in it (errands modules resolved; others by
    their top-level name)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name if alias.name in known else alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("errands"):
                yield target.split(".")[0]
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                # ``from . import x`` names a module; ``from .x import y`` a name in x.
                yield sub if sub in known else target


def graph() -> dict[str, set[str]]:
    found = modules()
    known = set(found)
    return {name: set(imports(name, path, known)) for name, path in found.items()}


def in_folder(module: str, folder: str) -> bool:
    return module == f"errands.{folder}" or module.startswith(f"errands.{folder}.")


def test_core_imports_only_core_and_errors() -> None:
    bad = {
        (m, t)
        for m, targets in graph().items()
        if in_folder(m, "core")
        for t in targets
        if (t.startswith("errands") and not in_folder(t, "core") and t != "errands.errors")
        or t in IO_MODULES
    }
    assert bad == set()


def test_backends_import_only_core_and_errors() -> None:
    g = graph()
    assert sum(in_folder(m, "backends") for m in g) >= 6
    bad = {
        (m, t)
        for m, targets in g.items()
        if in_folder(m, "backends")
        for t in targets
        if t.startswith("errands")
        and not (in_folder(t, "backends") or in_folder(t, "core") or t == "errands.errors")
    }
    assert bad == set()


def test_nothing_imports_cli_or_web_but_themselves() -> None:
    bad = set()
    for m, targets in graph().items():
        for folder in ("cli", "web"):
            if (
                in_folder(m, folder)
                or m in ENTRY_POINTS
                or (folder == "web" and in_folder(m, "cli"))
            ):
                continue
            bad |= {(m, t) for t in targets if in_folder(t, folder)}
    assert bad == set()


def is_root(module: str) -> bool:
    """A module at the package root (errands.queue, errands.tasks…), not in a folder."""
    return module.count(".") == 1 and module not in {f"errands.{f}" for f in FOLDERS}


FOLDERS = ("core", "backends", "client", "worker", "maintenance", "cli", "web")
# The root modules that may import client/: the Queue, whose parts client/ holds.
CLIENT_USERS = {"errands.queue"}


def test_the_worker_never_imports_the_queues_parts() -> None:
    """worker/ runs what a Queue hands it (worker.inputs.WorkerSource); client/ is the Queue's
    own parts, so an import from it runs back up a layer."""
    bad = {
        (m, t)
        for m, targets in graph().items()
        if in_folder(m, "worker")
        for t in targets
        if in_folder(t, "client")
    }
    assert bad == set()


def test_root_modules_import_client_only_through_the_queue() -> None:
    g = graph()
    assert {m for m in g if is_root(m)} >= {"errands.queue", "errands.tasks", "errands.metrics"}
    bad = {
        (m, t)
        for m, targets in g.items()
        if is_root(m) and m not in CLIENT_USERS
        for t in targets
        if in_folder(t, "client")
    }
    assert bad == set()


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), or a self-loop."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in g.get(v, ()):
            if w not in g:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in g.get(v, ()):
                found.append(sorted(component))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle() -> None:
    assert cycles(graph()) == []


def test_the_checks_see_what_they_look_for(tmp_path: Path) -> None:
    known = {"errands.queue", "errands.worker", "errands.worker.loop", "errands.core.states"}
    text = (
        "from ..queue import Queue\n"
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from . import loop\n"
        "def f():\n"
        "    import errands.core.states\n"
        "    import sqlite3\n"
    )
    path = tmp_path / "db.py"
    path.write_text(text)
    found = set(imports("errands.worker.db", path, known))
    assert found == {
        "errands.queue",
        "errands.worker.loop",
        "errands.core.states",
        "sqlite3",
        "typing",
    }
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


MAX_LINES = 600  # docs/architecture.md: a file past this is split by concern


def test_no_source_file_is_over_600_lines() -> None:
    long = {
        str(p.relative_to(PACKAGE)): n
        for p in PACKAGE.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}
