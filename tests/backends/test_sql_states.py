"""Every state literal in the SQL (both dialects: named queries, migrations, trigger bodies)
is a state of ``errands.core.states``, and every list of them is one of its named sets.

The queries keep some states as literals on purpose (a partial index is used only when the
predicate's state is a literal, not a parameter), so they cannot be bound from Python; this
test is what keeps them equal to the state machine. Each literal is classified by the context
it appears in — a CHECK list of a table, a list or comparison on a job's status, on an
attempt's status, on a figure's measure, or on the ``:to_state`` parameter — and checked
against what that context allows. A state-like literal in a context the test does not know
fails too, naming the file and line, so a new kind of use is looked at rather than passed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

import pytest

from errands.core.states import (
    ACTIVE,
    TERMINAL,
    UNFINISHED,
    AttemptStatus,
    State,
    transition,
)

JOB_STATES = frozenset(s.value for s in State)
ATTEMPT_STATES = frozenset(s.value for s in AttemptStatus)
ACTIVE_NAMES = frozenset(s.value for s in ACTIVE)
TERMINAL_NAMES = frozenset(s.value for s in TERMINAL)
UNFINISHED_NAMES = frozenset(s.value for s in UNFINISHED)
# job_stats_minutely.measure: an outcome (a terminal state) or a duration histogram.
DURATIONS = frozenset({"wait", "run"})
# The tables whose status column holds each vocabulary, for the CHECK lists.
CHECKED_TABLES = {"jobs": JOB_STATES, "job_attempts": ATTEMPT_STATES}
VOCABULARY = JOB_STATES | ATTEMPT_STATES

_LITERAL = re.compile(r"'((?:[^']|'')*)'")
_TOKENS = re.compile(r"'(?:[^']|'')*'|--[^\n]*")
# <qualifier.>column IN ( 'a', 'b' ) — the columns that hold states or measures.
_IN_LIST = re.compile(
    r"(?:\b(\w+)\.)?\b(status|old_status|attempt_status|measure)\s+IN\s*\(([^()]*)\)",
    re.IGNORECASE,
)
# <qualifier.>column = 'a' (or <>, !=), and the :to_state parameter compared to a literal.
_COMPARE = re.compile(
    r"(?:\b(\w+)\.)?(\bstatus|\bold_status|\battempt_status|\bmeasure|:to_state)"
    r"\s*(?:=|<>|!=)\s*'(\w*)'",
    re.IGNORECASE,
)
# 'a' AS status — a state named as the status column of a SELECT arm that reads only that
# state's rows from its partial index (which does not hold the status column).
_LABEL = re.compile(r"'(\w*)'\s+AS\s+status\b", re.IGNORECASE)
_ARM_END = re.compile(r"\bUNION\b|;", re.IGNORECASE)
# status <type> [NOT NULL] DEFAULT 'a' — a column's default, in a CREATE TABLE.
_DEFAULT = re.compile(r"\bstatus\s+\w+\s+(?:NOT\s+NULL\s+)?DEFAULT\s+'(\w*)'", re.IGNORECASE)
ENQUEUED_STATE = transition("enqueue").target.value
_CHECK_BEFORE = re.compile(r"CHECK\s*\(\s*$", re.IGNORECASE)
# The table a CHECK belongs to: the last CREATE TABLE (or ALTER TABLE … ADD CONSTRAINT) above.
_CREATE_TABLE = re.compile(
    r"(?:CREATE\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?|ALTER\s+TABLE\s+)\"?(\w+)", re.IGNORECASE
)
_ATTEMPT_ALIAS = re.compile(r"\bjob_attempts\s+(?:AS\s+)?(\w+)", re.IGNORECASE)
_NOT_ALIAS = {"where", "join", "on", "set", "left", "inner", "group", "order", "limit"}


@dataclass(frozen=True)
class Finding:
    where: str  # file:line
    context: str  # what the literal was classified as
    values: frozenset[str]
    problem: str | None  # None: fine


def without_comments(text: str) -> str:
    """Comments blanked (string literals kept whole, so a '--' inside one survives); every
    offset and line number stays where it was."""
    return _TOKENS.sub(
        lambda m: m.group(0) if m.group(0).startswith("'") else " " * len(m.group(0)), text
    )


def _statement(text: str, pos: int) -> str:
    start = text.rfind(";", 0, pos) + 1
    end = text.find(";", pos)
    return text[start : end if end != -1 else len(text)]


def _attempt_aliases(statement: str) -> set[str]:
    aliases = {"job_attempts"}
    for m in _ATTEMPT_ALIAS.finditer(statement):
        if m.group(1).lower() not in _NOT_ALIAS:
            aliases.add(m.group(1).lower())
    return aliases


def _is_attempt_column(text: str, pos: int, qualifier: str | None, column: str) -> bool:
    if column == "attempt_status":  # an attempt's status beside its job's (batch figures)
        return True
    statement = _statement(text, pos)
    if qualifier is not None:
        return qualifier.lower() in _attempt_aliases(statement)
    # A bare column: the attempts' when the statement is about job_attempts only.
    return bool(re.search(r"\bjob_attempts\b", statement)) and not re.search(r"\bjobs\b", statement)


def _table_of_check(text: str, pos: int) -> str | None:
    tables = list(_CREATE_TABLE.finditer(text, 0, pos))
    return tables[-1].group(1).lower() if tables else None


def _label_problem(value: str, reads_it: object) -> str | None:
    if value not in JOB_STATES:
        return "not a job state"
    if not reads_it:
        return f"a status label must name the state its SELECT reads (status = '{value}')"
    return None


def classify(name: str, text: str) -> list[Finding]:
    """Every state literal of one SQL file, classified, with what is wrong with it if
    anything; unclassified state-like literals come back as problems."""
    text = without_comments(text)
    found: list[Finding] = []
    seen: set[int] = set()  # offsets of literals a context has claimed

    def line(pos: int) -> str:
        return f"{name}:{text.count(chr(10), 0, pos) + 1}"

    def add(pos: int, context: str, values: frozenset[str], problem: str | None) -> None:
        found.append(Finding(line(pos), context, values, problem))

    for m in _IN_LIST.finditer(text):
        qualifier, column = m.group(1), m.group(2).lower()
        literals = [(lm.group(1), m.start(3) + lm.start()) for lm in _LITERAL.finditer(m.group(3))]
        if not literals:
            continue  # a parameter list, or numbers
        seen.update(p for _, p in literals)
        values = frozenset(v for v, _ in literals)
        if _CHECK_BEFORE.search(text[max(0, m.start() - 40) : m.start()]):
            # A table rebuilt to change its CHECK is created as <name>_new, then renamed.
            table = (_table_of_check(text, m.start()) or "").removesuffix("_new")
            expected = CHECKED_TABLES.get(table)
            if expected is None:
                add(
                    m.start(),
                    f"CHECK list of {table}",
                    values,
                    "a CHECK list the test does not know",
                )
            else:
                # An older migration's list may be a past vocabulary (a later migration
                # widens it: test_the_last_check_of_each_table_lists_every_state).
                problem = (
                    None
                    if values <= expected
                    else f"CHECK of {table} lists {sorted(values - expected)}: not states"
                )
                add(m.start(), f"CHECK list of {table}", values, problem)
        elif column == "measure":
            states, rest = values & VOCABULARY, values - VOCABULARY
            problem = None
            # A list naming outcomes names all of them; one of durations only names none.
            if states and states != TERMINAL_NAMES:
                problem = f"the outcomes of a measure list must be {sorted(TERMINAL_NAMES)}"
            elif not rest <= DURATIONS:
                problem = f"unknown measures {sorted(rest - DURATIONS)}"
            add(m.start(), "measure list", values, problem)
        elif _is_attempt_column(text, m.start(), qualifier, column):
            problem = None if values <= ATTEMPT_STATES else "not attempt statuses"
            add(m.start(), "attempt status list", values, problem)
        else:
            problem = (
                None
                if values in (ACTIVE_NAMES, TERMINAL_NAMES, UNFINISHED_NAMES)
                else "a list of job states must be states.ACTIVE or states.TERMINAL "
                "(or states.UNFINISHED)"
            )
            add(m.start(), "job status list", values, problem)

    for m in _COMPARE.finditer(text):
        qualifier, column, value = m.group(1), m.group(2).lower(), m.group(3)
        if not value:
            continue  # status || '' = :from_state: the empty string, not a state
        seen.add(m.start(3) - 1)
        values = frozenset({value})
        if column == "measure":
            ok = value in TERMINAL_NAMES | DURATIONS
            add(m.start(), "measure", values, None if ok else "not a measure")
        elif column == ":to_state":
            add(m.start(), ":to_state", values, None if value in JOB_STATES else "not a state")
        elif _is_attempt_column(text, m.start(), qualifier, column):
            ok = value in ATTEMPT_STATES
            add(m.start(), "attempt status", values, None if ok else "not an attempt status")
        else:
            ok = value in JOB_STATES
            add(m.start(), "job status", values, None if ok else "not a job state")

    for m in _LABEL.finditer(text):
        value = m.group(1)
        seen.add(m.start(1) - 1)
        end = _ARM_END.search(text, m.end())
        arm = text[m.end() : end.start() if end else len(text)]
        reads_it = re.search(rf"\bstatus\s*=\s*'{value}'", arm, re.IGNORECASE)
        add(m.start(), "job status label", frozenset({value}), _label_problem(value, reads_it))

    for m in _DEFAULT.finditer(text):
        seen.add(m.start(1) - 1)
        # A table rebuilt to change a CHECK is created as <name>_new (sqlite migration 0009).
        table = (_table_of_check(text, m.start()) or "").removesuffix("_new")
        ok = table == "jobs" and m.group(1) == ENQUEUED_STATE
        problem = None if ok else f"a new job's status is {ENQUEUED_STATE!r} (states: enqueue)"
        add(m.start(), f"DEFAULT of {table}", frozenset({m.group(1)}), problem)

    for lm in _LITERAL.finditer(text):
        if lm.start() not in seen and lm.group(1) in VOCABULARY:
            add(
                lm.start(),
                "unclassified",
                frozenset({lm.group(1)}),
                "a state literal in a context this test does not know",
            )
    return found


def sql_files() -> list[tuple[str, str]]:
    root = resources.files("errands.backends.sql")
    out = []
    for dialect in ("sqlite", "postgres"):
        for entry in sorted(root.joinpath(dialect).iterdir(), key=lambda e: e.name):
            if entry.name.endswith(".sql"):
                out.append((f"{dialect}/{entry.name}", entry.read_text()))
    return out


def test_every_state_literal_in_the_sql_is_a_state_of_the_machine() -> None:
    files = sql_files()
    findings = [f for name, text in files for f in classify(name, text)]
    problems = [
        f"{f.where}: {f.context} {sorted(f.values)}: {f.problem}" for f in findings if f.problem
    ]
    assert problems == []
    # It saw what it should, in both dialects, so it cannot pass on nothing.
    for dialect in ("sqlite", "postgres"):
        mine = [f for f in findings if f.where.startswith(dialect + "/")]
        checks = {f.context for f in mine if f.context.startswith("CHECK")}
        assert checks == {"CHECK list of jobs", "CHECK list of job_attempts"}, dialect
        contexts = {f.context for f in mine}
        assert {"job status list", "job status", "measure list", ":to_state"} <= contexts
        triggers = [f for f in mine if "migration_0002" in f.where]
        assert len(triggers) >= 5, f"{dialect}: the trigger SQL of migration_0002 was not read"


def test_the_last_check_of_each_table_lists_every_state() -> None:
    # Migrations run in order, so the last CHECK list of a table (its latest rebuild or
    # constraint) is the one in force: it must list the whole vocabulary of the machine.
    for dialect in ("sqlite", "postgres"):
        last: dict[str, frozenset[str]] = {}
        for name, text in sql_files():
            if name.startswith(f"{dialect}/migration_"):
                for f in classify(name, text):
                    if f.context.startswith("CHECK list of "):
                        table = f.context.removeprefix("CHECK list of ").removesuffix("_new")
                        last[table] = f.values
        for table, expected in CHECKED_TABLES.items():
            assert last[table] == expected, f"{dialect}: the CHECK in force on {table}"


def test_every_migration_is_read() -> None:
    names = {name for name, _ in sql_files()}
    for dialect in ("sqlite", "postgres"):
        migrations = {n for n in names if n.startswith(f"{dialect}/migration_")}
        assert f"{dialect}/migration_0002.sql" in migrations
        assert len(migrations) >= 3


@pytest.mark.parametrize(
    ("sql", "problem"),
    [
        # a CHECK list with a literal that is no state (a list missing one is an older
        # migration's: test_the_last_check_of_each_table_lists_every_state checks the last)
        (
            "CREATE TABLE jobs (status TEXT CHECK (status IN ('queued', 'running', 'done')));",
            "not states",
        ),
        # an attempts CHECK with a job-only state
        (
            "CREATE TABLE job_attempts (status TEXT CHECK "
            "(status IN ('running', 'succeeded', 'failed', 'cancelled', 'queued')));",
            "not states",
        ),
        # a terminal set missing one state
        (
            "SELECT id FROM jobs WHERE status IN ('succeeded', 'failed');",
            "ACTIVE or states.TERMINAL",
        ),
        # a job-only state as an attempt's status
        (
            "SELECT 1 FROM batch WHERE attempt_status IN ('queued', 'failed');",
            "not attempt statuses",
        ),
        # a typo in a comparison
        ("SELECT id FROM jobs WHERE status = 'sucseeded';", "not a job state"),
        # an attempt status on a job
        ("SELECT id FROM jobs WHERE status = 'lost';", "not a job state"),
        # measures: outcomes incomplete, or an unknown measure
        (
            "SELECT 1 FROM m WHERE measure IN ('succeeded', 'failed', 'wait');",
            "outcomes of a measure",
        ),
        (
            "SELECT 1 FROM m WHERE measure IN ('succeeded', 'failed', 'cancelled', 'idle');",
            "unknown measures",
        ),
        # a new job's default status other than the enqueue transition's target
        ("CREATE TABLE jobs (status TEXT NOT NULL DEFAULT 'running');", "a new job's status"),
        # a label that names another state than the rows its SELECT reads
        (
            "SELECT 'queued' AS status, COUNT(*) FROM jobs WHERE status = 'running' "
            "UNION ALL SELECT 'running' AS status, 1 FROM jobs WHERE status = 'queued';",
            "a status label must name the state",
        ),
        # a state in a context the test does not know
        ("SELECT CASE kind WHEN 'queued' THEN 1 END FROM jobs;", "context this test does not know"),
    ],
)
def test_the_check_sees_a_wrong_literal(sql: str, problem: str) -> None:
    problems = [f.problem or "" for f in classify("x.sql", sql) if f.problem]
    assert problems and any(problem in p for p in problems), problems


def test_the_check_passes_what_is_right() -> None:
    sql = (
        "CREATE TABLE jobs (status TEXT CHECK "
        "(status IN ('queued', 'running', 'succeeded', 'failed', 'cancelled')));\n"
        "SELECT a.id FROM job_attempts AS a JOIN jobs AS j ON j.id = a.job_id\n"
        "  WHERE a.status IN ('succeeded', 'lost') AND j.status = 'running';\n"
        "-- a comment may say status = 'whatever'\n"
        "UPDATE jobs SET run_at = CASE WHEN :to_state = 'queued' THEN 1 END "
        "WHERE status IN ('running', 'queued');\n"
        "SELECT 'queued' AS status, COUNT(*) FROM jobs WHERE status = 'queued';\n"
    )
    findings = classify("x.sql", sql)
    assert [f.problem for f in findings if f.problem] == []
    assert {f.context for f in findings} == {
        "CHECK list of jobs",
        "attempt status list",
        "job status",
        ":to_state",
        "job status list",
        "job status label",
    }


def test_comments_keep_their_place() -> None:
    text = "a -- 'queued'\nb 'x--y'"
    assert without_comments(text) == "a " + " " * len("-- 'queued'") + "\nb 'x--y'"
