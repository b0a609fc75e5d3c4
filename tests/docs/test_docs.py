"""The newcomer docs say what the code does."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from errands.core.states import TRANSITIONS, Event

ROOT = Path(__file__).resolve().parents[2]
ARROW = re.compile(r"^\s*(\[\*\]|\w+) --> (\w+|\[\*\])(?:: (\w+) / (\w+))?\s*$")


@pytest.mark.parametrize("page", ["states.md", "concepts.md"])
def test_state_diagram_draws_exactly_the_transitions_table(page: str) -> None:
    text = (ROOT / "docs" / page).read_text()
    drawn = set()
    for line in text.splitlines():
        m = ARROW.match(line)
        if m and m.group(3):
            drawn.add((m.group(1), m.group(2), m.group(3), m.group(4)))
    defined = set()
    for t in TRANSITIONS.values():
        event = t.event.value if t.event else ""
        for source in t.source or {"[*]"}:
            defined.add((str(source), t.target.value, t.name, event))
    assert drawn == defined


def test_the_events_table_lists_exactly_the_events() -> None:
    text = (ROOT / "docs" / "states.md").read_text()
    section = text.split("## Events (`job_events.event`)")[1].split("\n## ")[0]
    rows = set(re.findall(r"^\| `([A-Z_]+)` \|", section, re.M))
    assert rows == {e.value for e in Event}


def test_readme_opens_with_the_two_newcomer_commands() -> None:
    text = (ROOT / "README.md").read_text()
    first_block = re.search(r"```(?:sh|bash|console)?\n(.*?)```", text, re.S)
    assert first_block is not None
    assert first_block.group(1).split("\n")[:2] == ["make demo", "make test"]
    assert text.index("make demo") < text.index("##")


def test_the_readme_is_short_and_links_the_docs() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 150  # a newcomer reads it in five minutes; the rest: docs/
    assert "make docs" in text and "docs/getting-started.md" in text
