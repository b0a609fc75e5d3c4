"""The SQL in docs/operations.md runs: every statement of the SQLite section on SQLite and of
the PostgreSQL section on PostgreSQL, against a queue holding jobs in every state, a live
worker, a periodic schedule and rolled-up hours; and the first question's answer agrees with
``q.stats()``."""

from __future__ import annotations

import re
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

import errands
from helpers.ops import DAY, assert_figures_equal_a_recount, enqueue, register_worker, run_job
from helpers.support import FixedClock, is_postgres

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "operations.md"


def doc_statements(dialect: str) -> list[str]:
    """The statements of the fenced ```sql blocks under the doc's '### SQLite' or
    '### PostgreSQL' heading, comments dropped."""
    text = DOC.read_text()
    sections = re.split(r"^### ", text, flags=re.M)
    heading = {"sqlite": "SQLite", "postgres": "PostgreSQL"}[dialect]
    (section,) = [s for s in sections if s.startswith(heading + "\n")]
    section = re.split(r"^## ", section, flags=re.M)[0]  # up to the next chapter
    statements = []
    for block in re.findall(r"```sql\n(.*?)```", section, re.S):
        code = "\n".join(line for line in block.splitlines() if not line.lstrip().startswith("--"))
        statements += [s.strip() for s in code.split(";") if s.strip()]
    return statements


def test_the_doc_has_both_sections_alike() -> None:
    lite, pg = doc_statements("sqlite"), doc_statements("postgres")
    assert len(lite) == len(pg) >= 8  # one answer per question in each dialect


def _populate(url: str) -> errands.Queue:
    """Jobs in every state now (the doc's queries use the real time), old ones pruned into
    job_stats_hourly, a live worker and a schedule."""
    now = time.time()
    with errands.Queue(url, clock=FixedClock(now - 40 * DAY)) as old:
        run_job(
            old,
            "report",
            run_at=now - 40 * DAY,
            started=now - 40 * DAY + 1,
            finished=now - 40 * DAY + 2,
        )
    q = errands.Queue(url, retention={"succeeded": DAY})
    assert q.prune(now=now).total == 1  # rolled up
    run_job(q, "email", run_at=now - 600, started=now - 590, finished=now - 580)
    run_job(
        q,
        "sms",
        run_at=now - 500,
        started=now - 490,
        finished=now - 480,
        outcome="failed",
        failures_first=1,
    )
    run_job(q, "fax", run_at=now - 30, started=now - 20, finished=None, outcome="running")
    enqueue(q, "email", at=now - 120)  # due, waiting
    enqueue(q, "unhandled", at=now - 60)
    cancelled = enqueue(q, "email", at=now - 60, run_at=now + 3600)
    q.cancel(cancelled)
    register_worker(q, "host:1:w", at=now, types=["email", "sms", "fax"])
    q.periodic(every=3600, name="hourly")(lambda: None)
    return q


def _run(url: str, statements: list[str]) -> list[list[tuple[Any, ...]]]:
    if is_postgres(url):
        import psycopg

        with psycopg.connect(url, autocommit=True) as pg:
            return [list(pg.execute(s).fetchall()) for s in statements]
    conn = sqlite3.connect(url)
    try:
        return [conn.execute(s).fetchall() for s in statements]
    finally:
        conn.close()


def test_every_documented_query_runs(db_url: str) -> None:
    dialect = "postgres" if is_postgres(db_url) else "sqlite"
    statements = doc_statements(dialect)
    q = _populate(db_url)
    try:
        results = _run(db_url, statements)
        # Question 1 agrees with the API's counts.
        counts: dict[str, int] = {}
        for status, _queue, _type, n in results[0]:
            counts[status] = counts.get(status, 0) + int(n)
        assert counts == {k: v for k, v in q.stats()["counts"].items() if v}
        assert set(counts) == {"queued", "running", "succeeded", "failed", "cancelled"}
        # The data reaches the other answers too: not a run over empty tables.
        assert [s for s, rows in zip(statements, results, strict=True) if not rows] == []
    finally:
        q.close()


@pytest.mark.parametrize("dialect", ["sqlite", "postgres"])
def test_statements_are_split_whole(dialect: str) -> None:
    for statement in doc_statements(dialect):
        assert statement.upper().startswith("SELECT"), statement[:60]
        assert statement.count("(") == statement.count(")"), statement[:60]


def recount_blocks() -> dict[str, str]:
    """The recount of "Figures kept in the database": its SQLite block, then PostgreSQL's."""
    chapter = DOC.read_text().split("\n## Figures kept in the database\n")[1].split("\n## ")[0]
    blocks = [b for b in re.findall(r"```sql\n(.*?)```", chapter, re.S) if b.startswith("BEGIN")]
    lite, pg = blocks
    return {"sqlite": lite, "postgres": pg}


def _run_script(url: str, script: str) -> None:
    if is_postgres(url):
        import psycopg

        with psycopg.connect(url, autocommit=True) as pg:
            pg.execute(script.encode())
        return
    conn = sqlite3.connect(url, isolation_level=None)
    try:
        conn.executescript(script)
    finally:
        conn.close()


def test_the_documented_recount_puts_the_figures_right_after_a_hand_update(db_url: str) -> None:
    q = _populate(db_url)
    try:
        assert_figures_equal_a_recount(db_url)
        failed = q.stats()["counts"]["failed"]
        # The application fails the running job by hand: errands does not see it.
        at = "now()" if is_postgres(db_url) else "CAST(strftime('%s', 'now') AS REAL)"
        _run_script(
            db_url,
            f"UPDATE jobs SET status = 'failed', finished_at = {at}, error_code = 'HAND:MADE' "
            "WHERE type = 'fax'",
        )
        assert q.stats()["counts"]["failed"] == failed
        with pytest.raises(AssertionError):
            assert_figures_equal_a_recount(db_url)
        _run_script(db_url, recount_blocks()["postgres" if is_postgres(db_url) else "sqlite"])
        assert q.stats()["counts"]["failed"] == failed + 1
        assert_figures_equal_a_recount(db_url)
        assert "HAND:MADE" in {e["error_code"] for e in q.errors(top=10)}
    finally:
        q.close()


def _with_prefix(url: str, prefix: str) -> str:
    base = url if "://" in url else f"sqlite:///{url}"
    return f"{base}{'&' if '?' in base else '?'}table_prefix={prefix}"


def test_every_documented_query_runs_under_a_table_prefix(db_url: str) -> None:
    """The doc's "read each name with the prefix" rule, applied with the public helper
    ``q.table``: every statement answers on a prefixed database beside an application's own
    ``jobs`` table, and question 1 still agrees with ``q.stats()``."""
    from errands.backends.sql import object_names

    dialect = "postgres" if is_postgres(db_url) else "sqlite"
    if is_postgres(db_url):
        # pg_url is migrated unprefixed: a schema of the test's own for the prefixed queue.
        import psycopg

        with psycopg.connect(db_url, autocommit=True) as pg:
            pg.execute("CREATE SCHEMA app")
        db_url = f"{db_url}{'&' if '?' in db_url else '?'}options=-csearch_path%3Dapp"
    plain = db_url
    _run_ddl(plain, "CREATE TABLE jobs (id INTEGER PRIMARY KEY, title TEXT)")
    q = _populate(_with_prefix(db_url, "errands_"))
    try:
        assert q.table_prefix == "errands_"
        names = object_names(dialect)
        statements = [
            re.sub(r"\b\w+\b", lambda m: q.table(m[0]) if m[0] in names else m[0], s)
            for s in doc_statements(dialect)
        ]
        assert all("errands_" in s for s in statements)
        results = _run(plain, statements)
        counts: dict[str, int] = {}
        for status, _queue, _type, n in results[0]:
            counts[status] = counts.get(status, 0) + int(n)
        assert counts == {k: v for k, v in q.stats()["counts"].items() if v}
        assert [s for s, rows in zip(statements, results, strict=True) if not rows] == []
        assert _run(plain, ["SELECT count(*) FROM jobs"]) == [[(0,)]]  # the app's, untouched
    finally:
        q.close()


def _run_ddl(url: str, statement: str) -> None:
    if is_postgres(url):
        import psycopg

        with psycopg.connect(url, autocommit=True) as pg:
            pg.execute(statement)
        return
    conn = sqlite3.connect(url)
    try:
        with conn:
            conn.execute(statement)
    finally:
        conn.close()


def test_the_documented_prefix_rule_and_urls_are_the_codes(tmp_path: Path) -> None:
    from errands.backends.prefix import RULE

    chapter = DOC.read_text().split("## Beside your application's own tables")[1]
    chapter = chapter.split("\n## ")[0]
    assert f"`{RULE.pattern}`" in chapter
    (block,) = re.findall(r"```python\n(.*?)```", chapter, re.S)
    urls = re.findall(r'Queue\("([^"]+)"(?:, table_prefix="(\w+)")?\)', block)
    assert len(urls) == 3
    for url, prefix in urls:
        if url.startswith("postgresql://"):
            continue  # the server in the example does not exist; the URL form is tested above
        path = tmp_path / "app.db"
        target = url.replace("app.db", str(path))  # sqlite:/// + /abs: four slashes
        with errands.Queue(target, table_prefix=prefix or None) as q:
            assert q.table_prefix == "errands_" and q.table("jobs") == "errands_jobs"
        path.unlink()
