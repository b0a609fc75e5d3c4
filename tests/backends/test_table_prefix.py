"""A table prefix (#21, docs/operations.md "Beside your application's own tables"): an
application that already has tables named ``jobs`` and ``workers`` (and an index named like
one of errands') hosts errands in the same database — SQLite file or PostgreSQL schema — with
``table_prefix=``. Every object errands creates carries the prefix, the prefixed schema is the
unprefixed one column for column, the application's tables are never touched, and a process
that names no prefix finds it."""

from __future__ import annotations

import re
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

import errands
from errands.backends import sql
from errands.backends.prefix import split_url
from errands.errors import ConfigurationError, SchemaConflictError
from helpers.support import get_job, is_sqlite, run_cli, wait_for

PREFIX = "errands_"
APP_ROWS = {"jobs": [(1, "the app's own job"), (2, "another")], "workers": [(1, "ada")]}


def with_prefix(url: str, prefix: str = PREFIX) -> str:
    if "://" not in url:
        url = f"sqlite:///{url}"  # an absolute path: sqlite:////abs/app.db
    return f"{url}{'&' if '?' in url else '?'}table_prefix={prefix}"


def _sqlite(url: str) -> sqlite3.Connection:
    return sqlite3.connect(split_url(url)[0].removeprefix("sqlite:///"))


def run_sql(url: str, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """One statement through a connection of the test's own (not errands')."""
    if is_sqlite(url):
        conn = _sqlite(url)
        try:
            with conn:
                return conn.execute(statement, params).fetchall()
        finally:
            conn.close()
    import psycopg

    with psycopg.connect(split_url(url)[0], autocommit=True) as pg:
        cur = pg.execute(statement.replace("?", "%s"), params)
        return cur.fetchall() if cur.description else []


@pytest.fixture(params=["sqlite", "postgres"])
def app_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An application's database: its own ``jobs`` and ``workers`` tables with rows, and an
    index named ``jobs_due`` — a name errands' migrations create too."""
    if request.param == "sqlite":
        url = str(tmp_path / "app.db")
    else:
        url = request.getfixturevalue("pg_empty_url")
    serial = "INTEGER PRIMARY KEY" if request.param == "sqlite" else "SERIAL PRIMARY KEY"
    run_sql(url, f"CREATE TABLE jobs (id {serial}, title TEXT NOT NULL)")
    run_sql(url, f"CREATE TABLE workers (id {serial}, name TEXT NOT NULL)")
    run_sql(url, "CREATE INDEX jobs_due ON jobs (title)")
    for table, rows in APP_ROWS.items():
        for row in rows:
            column = "title" if table == "jobs" else "name"
            run_sql(url, f"INSERT INTO {table} (id, {column}) VALUES (?, ?)", row)
    yield url


def app_state(url: str) -> list[Any]:
    """The application's rows and the definitions of its tables and index, byte for byte
    where the database keeps the text (SQLite's schema SQL)."""
    rows = [run_sql(url, f"SELECT * FROM {t} ORDER BY id") for t in ("jobs", "workers")]
    if is_sqlite(url):
        schema = run_sql(
            url,
            "SELECT type, name, tbl_name, sql FROM sqlite_master "
            "WHERE name IN ('jobs', 'workers', 'jobs_due') ORDER BY name",
        )
    else:
        schema = run_sql(
            url,
            "SELECT table_name, column_name, data_type, column_default FROM "
            "information_schema.columns WHERE table_schema = current_schema() AND "
            "table_name IN ('jobs', 'workers') ORDER BY 1, ordinal_position",
        ) + run_sql(
            url,
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema() "
            "AND tablename IN ('jobs', 'workers') ORDER BY 1",
        )
    return [rows, schema]


def objects(url: str) -> dict[str, str]:
    """Every object of the database (SQLite: but its own sqlite_*; PostgreSQL: relations
    and functions of current_schema()), name → kind."""
    if is_sqlite(url):
        rows = run_sql(url, "SELECT name, type FROM sqlite_master")
        return {n: k for n, k in rows if not n.startswith("sqlite_")}
    rows = run_sql(
        url,
        "SELECT c.relname, c.relkind::text FROM pg_class c JOIN pg_namespace n "
        "ON n.oid = c.relnamespace WHERE n.nspname = current_schema() "
        "UNION ALL SELECT p.proname, 'function' FROM pg_proc p JOIN pg_namespace n "
        "ON n.oid = p.pronamespace WHERE n.nspname = current_schema() "
        "UNION ALL SELECT t.tgname, 'trigger' FROM pg_trigger t JOIN pg_class c "
        "ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = current_schema() AND NOT t.tgisinternal",
    )
    return {str(n): str(k) for n, k in rows}


def columns(url: str, table: str) -> list[tuple[Any, ...]]:
    if is_sqlite(url):
        return [r[1:] for r in run_sql(url, f"PRAGMA table_info({table})")]
    return run_sql(
        url,
        "SELECT column_name, data_type, is_nullable, column_default FROM "
        "information_schema.columns WHERE table_schema = current_schema() AND table_name = ? "
        "ORDER BY ordinal_position",
        (table,),
    )


# -- the schema under a prefix ------------------------------------------------------------


def test_every_object_errands_creates_carries_the_prefix_and_the_app_keeps_its_own(
    app_url: str,
) -> None:
    before = app_state(app_url)
    with pytest.raises(SchemaConflictError, match=r"table_prefix='errands_'") as refused:
        errands.Queue(app_url)
    assert "jobs_due" in str(refused.value) and "nothing was changed" in str(refused.value)
    if not is_sqlite(app_url):
        assert "schema of its own" in str(refused.value)  # the other way on PostgreSQL
    assert app_state(app_url) == before
    app_objects = objects(app_url)
    with errands.Queue(with_prefix(app_url)) as q:
        assert q.table_prefix == PREFIX and q.table("jobs") == "errands_jobs"
        with pytest.raises(ValueError, match="not one of errands'"):
            q.table("orders")
    created = {n: k for n, k in objects(app_url).items() if n not in app_objects}
    # Every table, index, trigger, sequence and function errands made carries the prefix…
    assert created and [n for n in created if not n.startswith(PREFIX)] == []
    # …and is one of the list the rewriting uses (plus what the database derives from
    # them: PostgreSQL's primary keys, unique constraints' indexes and identity sequences).
    dialect = "sqlite" if is_sqlite(app_url) else "postgres"
    listed = {PREFIX + n for n in sql.object_names(dialect)}
    derived = {n for n in created if re.search(r"_(pkey|key|seq)$", n)}
    assert set(created) - derived <= listed
    named = {PREFIX + n for k, n in sql.created_objects(dialect)} | {PREFIX + sql.MIGRATIONS_TABLE}
    missing = {n for n in named if n not in created}
    # Only what a later migration drops, or renames away (a SQLite table rebuild's *_new).
    gone = {
        PREFIX + name.lower()
        for _, script in sql.migrations(dialect)
        for name in re.findall(
            r"\b(?:DROP\s+\w+\s+(?:IF\s+EXISTS\s+)?|ALTER\s+TABLE\s+)(\w+)", script, re.I
        )
    }
    assert missing and missing <= gone
    assert app_state(app_url) == before


def test_the_prefixed_schema_is_the_unprefixed_one_column_for_column(
    app_url: str, tmp_path: Path
) -> None:
    if is_sqlite(app_url):
        plain = str(tmp_path / "plain.db")
    else:
        run_sql(app_url, "CREATE SCHEMA plain")
        plain = f"{app_url}{'&' if '?' in app_url else '?'}options=-csearch_path%3Dplain"
    errands.Queue(with_prefix(app_url)).close()
    errands.Queue(plain).close()
    tables = sorted(n for k, n in sql.created_objects("sqlite") if k == "table")
    tables = [t for t in tables if not t.endswith("_new")] + [sql.MIGRATIONS_TABLE]
    for table in tables:
        assert columns(with_prefix(app_url), PREFIX + table) == columns(plain, table), table
        assert columns(plain, table), table


def test_no_column_shares_a_name_with_an_object_the_prefix_renames(tmp_path: Path) -> None:
    """The rewriting changes bare words that name errands' objects: a column of that name
    would be renamed too. None is, in either dialect's queries."""
    path = str(tmp_path / "plain.db")
    errands.Queue(path).close()
    tables = [r[0] for r in run_sql(path, "SELECT name FROM sqlite_master WHERE type='table'")]
    names = {c[0] for t in tables for c in columns(path, t)}
    for dialect in ("sqlite", "postgres"):
        assert names & sql.object_names(dialect) == set()
    # Comments, literals that are not exactly a name, parameters and casts stay as written.
    text = "SELECT 'jobs table', 'jobs', \"workers\", :jobs, x::text -- jobs\nFROM jobs j"
    assert sql.with_prefix("sqlite", text, "p_") == (
        "SELECT 'jobs table', 'p_jobs', \"p_workers\", :jobs, x::text -- jobs\nFROM p_jobs j"
    )


# -- working beside the application -------------------------------------------------------

WORKER_APP = """
import os

import errands

q = errands.Queue(os.environ["APP_DB"])


@q.task
def add(a: int, b: int) -> int:
    return a + b
"""


def test_a_real_worker_process_runs_the_jobs_beside_the_apps_tables(
    app_url: str, tmp_path: Path
) -> None:
    before = app_state(app_url)
    with errands.Queue(with_prefix(app_url)) as q:
        ids = [q.enqueue("add", {"a": i, "b": 1}) for i in range(3)]
    (tmp_path / "prefixed_app.py").write_text(textwrap.dedent(WORKER_APP))
    # The worker's Queue names no prefix: it finds the one installation.
    bare = app_url if is_sqlite(app_url) else split_url(app_url)[0]
    env = {"APP_DB": bare}
    # --db, the worker's cross-check, may name the prefix: another one is refused.
    wrong = run_cli(
        tmp_path,
        *("worker", "--app", "prefixed_app:q", "--burst", "--db", with_prefix(bare, "q_")),
        env=env,
    )
    assert wrong.returncode != 0 and "differs from the database" in wrong.stderr, wrong.stderr
    done = run_cli(
        tmp_path, "worker", "--app", "prefixed_app:q", "--burst", "--db", with_prefix(bare), env=env
    )
    assert done.returncode == 0, done.stderr
    with errands.Queue(app_url) as q:
        assert q.table_prefix == PREFIX
        assert [get_job(q, i).result for i in ids] == [1, 2, 3]
        assert q.stats()["counts"]["succeeded"] == 3
        assert q.prune(now=q.clock() + 365 * 86400).total == 3
        assert q.jobs() == []
    assert app_state(app_url) == before


def test_every_state_a_later_migration_allows_is_allowed_under_a_prefix(app_url: str) -> None:
    """A migration that widens a CHECK (0008: an attempt `snoozed`; 0009: a job `waiting`)
    drops the constraint by the name PostgreSQL generated from the table's name: under a
    prefix that name carries the prefix too, or the old CHECK stays and refuses the state."""
    with errands.Queue(with_prefix(app_url)) as q:

        @q.task
        def nap() -> None:
            raise errands.Snooze(3600)

        first = q.enqueue("nap", {})
        later = q.enqueue("nap", {}, after=[first])
        assert get_job(q, later).status == "waiting"
        q.run_worker(concurrency=1, burst=True)
        assert [a.status for a in q.attempts(first)] == ["snoozed"]
        assert get_job(q, first).status == "queued"


def test_a_bulk_enqueue_draws_its_ids_from_the_prefixed_sequence(app_url: str) -> None:
    """enqueue_many of 64 jobs or more draws its ids before writing them (PostgreSQL's COPY
    path looks the identity sequence up by the jobs table's name: the prefixed one), and
    the ids it returns are the jobs' own, in order, each with its ENQUEUED event."""
    before = app_state(app_url)
    with errands.Queue(with_prefix(app_url)) as q:
        ids = q.enqueue_many([("t", {"n": n}) for n in range(100)])
        assert ids == sorted(ids) and len(set(ids)) == 100
        assert [get_job(q, i).payload for i in ids] == [{"n": n} for n in range(100)]
        assert all([e.event for e in q.events(i)] == ["ENQUEUED"] for i in ids)
    assert app_state(app_url) == before


def test_connection_enqueue_commits_with_the_apps_own_transaction_or_not_at_all(
    app_url: str,
) -> None:
    before = app_state(app_url)
    with errands.Queue(with_prefix(app_url)) as q:
        if is_sqlite(app_url):
            app: Any = _sqlite(app_url)
            mark = "?"
            transaction: Callable[[], Any] = lambda: app  # noqa: E731
        else:
            import psycopg

            # The application's own connection, its own search_path: with a prefix errands'
            # tables sit beside the app's, so connection= needs no schema juggling.
            app = psycopg.connect(split_url(app_url)[0])
            mark, transaction = "%s", app.transaction
        try:
            with pytest.raises(RuntimeError):
                with transaction():
                    app.execute(f"INSERT INTO jobs (id, title) VALUES ({mark}, 'lost')", (9,))
                    q.enqueue("add", {"a": 0, "b": 0}, connection=app)
                    raise RuntimeError("the app changes its mind")
            assert q.jobs() == [] and app_state(app_url) == before
            with transaction():
                app.execute(f"INSERT INTO jobs (id, title) VALUES ({mark}, 'kept')", (3,))
                job_id = q.enqueue("add", {"a": 1, "b": 1}, connection=app)
        finally:
            app.close()
        assert [j.id for j in q.jobs()] == [job_id]
    rows = run_sql(app_url, "SELECT id, title FROM jobs ORDER BY id")
    assert rows == [*APP_ROWS["jobs"], (3, "kept")]


def test_the_cli_finds_the_prefix_from_a_bare_db(app_url: str, tmp_path: Path) -> None:
    before = app_state(app_url)
    with errands.Queue(with_prefix(app_url)) as q:
        job_id = q.enqueue("add", {"a": 1, "b": 2})
    bare = app_url if is_sqlite(app_url) else split_url(app_url)[0]
    shown = run_cli(tmp_path, "--db", bare, "show", str(job_id))
    assert shown.returncode == 0, shown.stderr
    assert "add" in shown.stdout
    stats = run_cli(tmp_path, "--db", bare, "stats", "--json")
    assert stats.returncode == 0, stats.stderr
    assert '"queued": 1' in stats.stdout
    check = run_cli(tmp_path, "--db", bare, "check")
    assert "table" not in check.stderr, check.stderr  # no schema complaint, whatever the health
    payload = '{"a": 2, "b": 2}'
    enq = run_cli(tmp_path, "--db", with_prefix(bare), "enqueue", "add", "--payload", payload)
    assert enq.returncode == 0, enq.stderr
    pruned = run_cli(tmp_path, "--db", bare, "prune")
    assert pruned.returncode == 0, pruned.stderr
    assert app_state(app_url) == before


def test_the_dashboard_api_reads_the_prefixed_tables(app_url: str) -> None:
    import json
    import urllib.request

    from helpers.web import served

    before = app_state(app_url)
    with errands.Queue(with_prefix(app_url)) as q:
        job_id = q.enqueue("add", {"a": 1, "b": 2})
    with served(with_prefix(app_url)) as base:
        with urllib.request.urlopen(base + "api/admin/jobs", timeout=10) as r:
            listed = json.load(r)
        with urllib.request.urlopen(base + "api/admin/stats", timeout=10) as r:
            stats = json.load(r)
    text = json.dumps(listed)
    assert f'"id": {job_id}' in text and "the app's own job" not in text
    assert stats["counts"]["queued"] == 1
    assert app_state(app_url) == before


# -- the errors -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad", ["Errands_", "1x", "x-y", "", "a" * 32, "x;drop table jobs", "ünï_"]
)
def test_a_bad_prefix_is_refused_naming_the_rule(bad: str, tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    rule = r"\[a-z\]\[a-z0-9_\]\{0,30\}"
    if not bad:  # '' names no prefix, explicitly
        errands.Queue(str(path), table_prefix=bad).close()
        path.unlink()
    else:
        with pytest.raises(ConfigurationError, match=rule):
            errands.Queue(str(path), table_prefix=bad)
        with pytest.raises(ConfigurationError, match=rule):
            errands.Queue(f"sqlite:///{path}?table_prefix={quote(bad)}")
    with pytest.raises(ConfigurationError, match=r"names table_prefix 2 times"):
        errands.Queue(f"sqlite:///{path}?table_prefix={quote(bad)}&table_prefix=zz_")
    assert not path.exists()


def test_the_url_and_the_argument_must_agree(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    with pytest.raises(ConfigurationError, match="name one"):
        errands.Queue(f"sqlite:///{path}?table_prefix=a_", table_prefix="b_")
    with errands.Queue(f"sqlite:///{path}?table_prefix=a_", table_prefix="a_") as q:
        assert q.table_prefix == "a_"


def test_a_prefix_that_disagrees_with_the_installation_is_refused(app_url: str) -> None:
    errands.Queue(with_prefix(app_url)).close()
    before = objects(app_url)
    with pytest.raises(
        SchemaConflictError, match=r"table_prefix='errands_'.*not table_prefix='q_'"
    ):
        errands.Queue(with_prefix(app_url, "q_"))
    assert objects(app_url) == before  # no second, empty queue beside the real one


def test_two_installations_and_no_prefix_named_is_refused_naming_both(
    app_url: str, tmp_path: Path
) -> None:
    errands.Queue(with_prefix(app_url, "a_")).close()
    # A second installation can only come from a database that had none of the first's
    # names: made here by hand, by copying the first one's migrations table.
    run_sql(app_url, "CREATE TABLE b_errands_migrations AS SELECT * FROM a_errands_migrations")
    with pytest.raises(SchemaConflictError, match=r"2 errands installations.*'a_'.*'b_'"):
        errands.Queue(app_url)
    cli = run_cli(
        tmp_path, "--db", app_url if is_sqlite(app_url) else split_url(app_url)[0], "stats"
    )
    assert cli.returncode != 0 and "table_prefix='a_'" in cli.stderr
    with errands.Queue(with_prefix(app_url, "a_")) as q:
        assert q.table_prefix == "a_"


def test_a_worker_started_without_the_prefix_runs_nothing_of_the_apps(app_url: str) -> None:
    """The worker's URL names no prefix; the discovery must not read the application's
    ``jobs`` as a queue (it never looks at tables that are not a migrations table)."""
    with errands.Queue(with_prefix(app_url)) as q:
        q.enqueue("add", {"a": 5, "b": 5})
    with errands.Queue(app_url) as q:

        @q.task
        def add(a: int, b: int) -> int:
            return a + b

        summary = q.run_worker(burst=True, handle_signals=False)
        assert summary.succeeded == 1
        wait_for(lambda: q.stats()["counts"]["succeeded"] == 1)


def test_a_sqlite_url_takes_no_other_parameters(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="only table_prefix"):
        errands.Queue(f"sqlite:///{tmp_path}/a.db?table_prefix=a_&mode=ro")
    assert not (tmp_path / "a.db").exists()
    assert split_url("postgresql://u@h/db?options=-c%20x%3Dy&table_prefix=a_") == (
        "postgresql://u@h/db?options=-c%20x%3Dy",
        "a_",
    )


def test_the_prefix_never_reaches_the_sqlite_file_name(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/a.db?table_prefix=a_"
    errands.Queue(url).close()
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".db") == ["a.db"]
    out = subprocess.run(
        [sys.executable, "-m", "errands", "--db", url, "jobs"], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr


def test_graduate_keeps_the_prefix_beside_the_apps_tables_on_both_sides(
    tmp_path: Path, pg_empty_url: str
) -> None:
    """A prefixed SQLite file graduates into a PostgreSQL database that has its own ``jobs``
    table too: errands' tables arrive under the same prefix, neither side's application
    tables are touched, and a bare URL finds the queue there."""
    from errands.cli.graduate.copy import TABLES, graduate

    path = str(tmp_path / "app.db")
    for url in (path, pg_empty_url):
        serial = "INTEGER PRIMARY KEY" if is_sqlite(url) else "SERIAL PRIMARY KEY"
        run_sql(url, f"CREATE TABLE jobs (id {serial}, title TEXT NOT NULL)")
        run_sql(url, "INSERT INTO jobs (id, title) VALUES (1, 'the app''s own job')")
    with errands.Queue(with_prefix(path)) as q:
        ids = [q.enqueue("add", {"a": i, "b": 0}) for i in range(3)]
    before = [run_sql(u, "SELECT * FROM jobs") for u in (path, pg_empty_url)]
    report = graduate(with_prefix(path), pg_empty_url)
    assert report.ok and report.table_prefix == PREFIX, report.summary()
    assert [run_sql(u, "SELECT * FROM jobs") for u in (path, pg_empty_url)] == before
    created = objects(pg_empty_url)
    assert {PREFIX + t for t, _ in TABLES} <= set(created)
    with errands.Queue(pg_empty_url) as q:
        assert q.table_prefix == PREFIX
        assert [get_job(q, i).payload for i in ids] == [{"a": i, "b": 0} for i in range(3)]
    # The CLI's graduate, from a bare --db: the file refuses new work afterwards (graduated).
    cli = run_cli(tmp_path, "--db", path, "enqueue", "add")
    assert cli.returncode != 0 and "graduate" in cli.stderr, cli.stderr


def test_the_cli_graduates_a_prefixed_file_named_bare(tmp_path: Path, pg_empty_url: str) -> None:
    path = str(tmp_path / "app.db")
    run_sql(path, "CREATE TABLE workers (id INTEGER PRIMARY KEY, name TEXT)")
    with errands.Queue(path, table_prefix="q_") as q:
        q.enqueue("add", {"a": 1, "b": 1})
    out = run_cli(tmp_path, "--db", path, "graduate", "--to", pg_empty_url)
    assert out.returncode == 0, out.stderr
    assert "prefix 'q_'" in out.stdout
    assert run_sql(pg_empty_url, "SELECT count(*) FROM q_jobs") == [(1,)]


def test_a_prefix_whose_names_the_app_already_uses_is_refused_untouched(app_url: str) -> None:
    run_sql(app_url, "CREATE TABLE app_jobs (id INTEGER PRIMARY KEY)")
    before = objects(app_url), app_state(app_url)
    with pytest.raises(SchemaConflictError, match=r"'app_jobs'.*another table_prefix than 'app_'"):
        errands.Queue(with_prefix(app_url, "app_"))
    assert (objects(app_url), app_state(app_url)) == before
