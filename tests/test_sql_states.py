"""The state machine is the one source: every state the SQL spells out is one of errands.states.

Fenced transitions bind their states from ``TRANSITIONS``, but some SQL still writes states as
literals — partial indexes, the active set of a unique key, the finished set of the reports,
the CHECK constraints. This test reads every ``sql/<dialect>/*.sql`` file (queries and
migrations) and requires that

- each literal compared with, or defaulted into, a ``status`` column names a state of that
  table (``jobs``: ``State``; ``job_attempts``: ``AttemptStatus``);
- each list of several states is ``states.ACTIVE`` or ``states.TERMINAL``, or, in a CHECK
  constraint, every state of the table;
- any other literal is one the test knows is not a state, so a misspelled state in a context
  the patterns do not recognize fails too.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from errands.backends import sql
from errands.periodic import CATCH_UP
from errands.states import ACTIVE, TERMINAL, AttemptStatus, State
from errands.tasks import DEFAULT_QUEUE

SQL_DIR = Path(sql.__file__).parent
FILES = sorted(SQL_DIR.glob("*/*.sql"))

TABLE_STATES = {
    "jobs": frozenset(s.value for s in State),
    "job_attempts": frozenset(s.value for s in AttemptStatus),
}
STATE_SETS = {frozenset(s.value for s in ACTIVE), frozenset(s.value for s in TERMINAL)}

# Literals that are not states, and why they are there.
NOT_STATES = {
    DEFAULT_QUEUE,  # jobs.queue / periodic.queue default
    "{}",  # an empty JSON payload default
    *CATCH_UP,  # periodic.catch_up default and values
    "table",  # sqlite_master.type
    "jobs",  # the table whose presence tells a database errands has
    "errands_migrations",  # the migrations table
}
JSON_PATH = re.compile(r"^\$\[\d+\]$")  # json_extract paths into a batch's rows

LITERAL = re.compile(r"'((?:[^']|'')*)'")
# A status literal: compared (status = 'x', :to_state = 'x'), in a list (status IN (…)), or a
# column default (status TEXT NOT NULL DEFAULT 'x').
STATUS_EQ = re.compile(r"(?:\bstatus|:to_state|:from_state)\s*(?:=|<>|!=)\s*'([^']*)'", re.I)
STATUS_IN = re.compile(r"\bstatus\s+(?:NOT\s+)?IN\s*\(([^)]*)\)", re.I)
STATUS_DEFAULT = re.compile(r"\bstatus\s+\w+\s+NOT\s+NULL\s+DEFAULT\s+'([^']*)'", re.I)
TABLE = re.compile(
    r"\b(?:CREATE\s+TABLE|CREATE\s+(?:UNIQUE\s+)?INDEX\s+\w+\s+ON|FROM|UPDATE)\s+(\w+)"
)


def _code(text: str) -> str:
    """The SQL without its comments (no literal here contains '--')."""
    return "\n".join(line.split("--", 1)[0] for line in text.splitlines())


def problems(text: str, default_table: str = "jobs") -> list[str]:
    """What is wrong with the state literals of one SQL file (an empty list: nothing)."""
    found: list[str] = []
    for statement in _code(text).split(";"):
        tables = [t for t in TABLE.findall(statement) if t in TABLE_STATES]
        table = tables[0] if tables else default_table
        states = TABLE_STATES[table]
        is_table = re.search(r"\bCREATE\s+TABLE\b", statement, re.I) is not None
        seen: set[tuple[int, int]] = set()
        for m in (*STATUS_EQ.finditer(statement), *STATUS_DEFAULT.finditer(statement)):
            seen.add(m.span(1))
            if m.group(1) not in states:
                found.append(f"{m.group(0)!r}: {m.group(1)!r} is not a {table} state")
        for m in STATUS_IN.finditer(statement):
            items = list(LITERAL.finditer(m.group(1)))
            if not items:
                continue  # a parameter or a subquery
            start = m.start(1)
            seen.update((start + i.start(1), start + i.end(1)) for i in items)
            listed = frozenset(i.group(1) for i in items)
            allowed = {states} if is_table else STATE_SETS
            if listed not in allowed:
                want = "every state" if is_table else "states.ACTIVE or states.TERMINAL"
                found.append(f"{m.group(0)!r}: {sorted(listed)} is not {want} of {table}")
        for m in LITERAL.finditer(statement):
            value = m.group(1)
            if m.span(1) in seen or value in NOT_STATES or JSON_PATH.match(value):
                continue
            found.append(f"literal {value!r} is neither a state in a status context nor known")
    return found


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_state_literals_are_the_state_machines(path: Path) -> None:
    assert problems(path.read_text()) == []


def test_check_constraints_list_every_state() -> None:
    migrations = [p for p in FILES if p.name.startswith("migration_")]
    assert migrations, "no migration files found"
    for path in migrations:
        code = _code(path.read_text())
        for table, states in TABLE_STATES.items():
            body = re.search(rf"CREATE TABLE {table}\s*\((.*?)\n\);", code, re.S)
            assert body is not None, f"{path.name}: no CREATE TABLE {table}"
            (check,) = re.findall(r"CHECK\s*\(\s*status\s+IN\s*\(([^)]*)\)", body.group(1))
            assert frozenset(LITERAL.findall(check)) == states, f"{path.name}: {table}"


def test_every_file_is_read() -> None:
    dialects = {p.parent.name for p in FILES}
    assert dialects == {"sqlite", "postgres"}
    # Status literals really are found (the patterns match the files as written).
    text = "".join(p.read_text() for p in FILES)
    assert len(STATUS_EQ.findall(text)) > 10 and len(STATUS_IN.findall(text)) > 5


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        ("SELECT id FROM jobs WHERE status = 'succeded'", "not a jobs state"),
        ("SELECT id FROM jobs WHERE status IN ('queued', 'failed')", "ACTIVE or"),
        ("UPDATE jobs SET x = CASE WHEN :to_state = 'lost' THEN 1 END", "not a jobs state"),
        ("SELECT id FROM jobs WHERE kind = 'runing'", "neither a state"),
        ("CREATE TABLE jobs (status TEXT NOT NULL CHECK (status IN ('queued')))", "every state"),
        ("CREATE TABLE jobs (status TEXT NOT NULL DEFAULT 'new')", "not a jobs state"),
    ],
)
def test_a_wrong_literal_is_caught(bad: str, why: str) -> None:
    (problem,) = problems(bad)
    assert why in problem


def test_attempt_states_belong_to_job_attempts() -> None:
    good = "CREATE INDEX a ON job_attempts (job_id) WHERE status = 'lost'"
    assert problems(good) == []
    assert problems("CREATE INDEX j ON jobs (id) WHERE status = 'lost'") != []
