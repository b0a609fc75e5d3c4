"""One front door: the CLI and the dashboard act on jobs and schedules through the Queue's one
implementation of each operator action (client/admin.py), never by calling a backend verb that
changes something — so what every action does (the fence, the chunks, the log line, the actor)
is written once. Reads still reach ``q.backend`` in places (the dashboard's boards and search);
this test counts changes only."""

from __future__ import annotations

import ast
from pathlib import Path

import errands
from errands.backends.base import Backend

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
