"""One front door: the CLI and the dashboard act on jobs and schedules through the Queue's one
implementation of each operator action (client/admin.py), never by calling a backend verb that
changes something — so what every action does (the fence, the chunks, the log line, the actor)
is written once. What they read comes through ``q.reads``, typed as the backend's read verbs
only (``errands.backends.verbs.ReadVerbs``): mypy refuses a change called on it, and the tests here
hold that cli/ and web/ never name ``.backend`` and that no implementation of a read verb
opens a write."""

from __future__ import annotations

import ast
import inspect
import typing
from pathlib import Path

import errands
from errands.backends.postgres import PostgresBackend
from errands.backends.sqlite import SQLiteBackend
from errands.backends.verbs import Backend, ReadVerbs

PACKAGE = Path(errands.__file__).parent
# Backend verbs that change rows on an operator's behalf.
OPERATOR_VERBS = {
    "retry",
    "cancel",
    "delete_jobs",
    "run_now",
    "set_priority",
    "match_ids",
    "remove_periodic",
    "disable_periodic",
    "enable_periodic",
    "run_periodic",
    "pause_queue",
    "resume_queue",
    "set_limit",
    "clear_limit",
    "prune_batch",
}


def test_the_operator_verbs_named_here_are_backend_verbs() -> None:
    assert [v for v in sorted(OPERATOR_VERBS) if not hasattr(Backend, v)] == []


def calls_on_backend(path: Path) -> list[tuple[int, str]]:
    """``….backend.VERB(…)`` calls in a module, with their line."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Attribute)
            and node.func.value.attr == "backend"
        ):
            found.append((node.lineno, node.func.attr))
    return found


def test_cli_and_web_change_nothing_past_the_queue() -> None:
    bad = [
        f"{path.relative_to(PACKAGE)}:{line} backend.{verb}()"
        for folder in ("cli", "web")
        for path in sorted((PACKAGE / folder).rglob("*.py"))
        for line, verb in calls_on_backend(path)
        if verb in OPERATOR_VERBS
    ]
    assert bad == [], "call the Queue's action instead (client/admin.py)"


def backend_attributes(path: Path) -> list[int]:
    """Lines where a module names ``….backend`` at all (a call, a local alias, a getattr)."""
    tree = ast.parse(path.read_text())
    found = [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr == "backend"
    ]
    found += [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("getattr", "setattr", "hasattr")
        and any(isinstance(a, ast.Constant) and a.value == "backend" for a in node.args)
    ]
    return found


def test_cli_and_web_reach_the_database_only_through_the_queue() -> None:
    bad = [
        f"{path.relative_to(PACKAGE)}:{line}"
        for folder in ("cli", "web")
        for path in sorted((PACKAGE / folder).rglob("*.py"))
        for line in backend_attributes(path)
    ]
    assert bad == [], "read through q.reads, change through a Queue method"


def read_verbs() -> list[str]:
    names = {n for n in dir(ReadVerbs) if not n.startswith("_") and callable(getattr(ReadVerbs, n))}
    return sorted(names - set(typing.Protocol.__dict__))


# What opens a write transaction in the SQL backends (host.py, jobs.py, figures.py).
WRITE_PATHS = ("self._write(", "self._write_rows(", "_write_grouped(", "self._user_conn(")


def test_no_read_verb_opens_a_write() -> None:
    verbs = read_verbs()
    assert len(verbs) > 30  # the read verbs were found
    assert [v for v in verbs if v in OPERATOR_VERBS - {"match_ids"}] == []
    opened = []
    for cls in (SQLiteBackend, PostgresBackend):
        for verb in verbs:
            source = inspect.getsource(getattr(cls, verb))
            opened += [f"{cls.__name__}.{verb}: {w}" for w in WRITE_PATHS if w in source]
    assert opened == [], "a verb that writes belongs in the Verbs protocols, not in ReadVerbs"


def test_every_read_verb_is_a_backend_verb() -> None:
    assert [v for v in read_verbs() if not hasattr(Backend, v)] == []
