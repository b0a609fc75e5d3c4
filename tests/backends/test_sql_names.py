"""Both dialects define the same named queries, so every shared verb finds its query on both."""

from __future__ import annotations

import re
from importlib import resources

import pytest

from errands.backends import sql
from errands.backends.postgres import CHANNEL


def shared(dialect: str) -> dict[str, str]:
    """A dialect's queries without its own.sql (statements only it has, run by a hook)."""
    own = sql.own_queries(dialect)
    return {name: text for name, text in sql.queries(dialect).items() if name not in own}


def test_dialects_define_the_same_query_names() -> None:
    sqlite, postgres = set(shared("sqlite")), set(shared("postgres"))
    assert sqlite - postgres == sql.REPLACED["postgres"], "queries missing from sql/postgres"
    assert postgres - sqlite == sql.REPLACED["sqlite"], "queries missing from sql/sqlite"


def test_a_replaced_query_has_the_query_that_replaces_it() -> None:
    # PostgreSQL keeps no claim: its plain claim is always claim_recorded (one statement).
    assert sql.REPLACED == {"postgres": {"claim"}, "sqlite": set()}
    assert "claim_recorded" in sql.own_queries("postgres")


def test_own_queries_are_only_the_dialects_own() -> None:
    # own.sql holds what only one dialect has; a name in both would be shared, and checked.
    assert sql.own_queries("postgres") == {
        "claim_recorded",
        "claim_ids_recorded",
        "insert_job_recorded",
    }
    assert sql.own_queries("sqlite") == {
        "limit_group_bytes",
        "mend_limit_group",
        "mend_limit_starts_group",
    }
    assert not sql.own_queries("postgres") & set(sql.queries("sqlite"))


def test_the_one_statement_enqueue_notifies_on_the_wake_up_channel() -> None:
    assert f"pg_notify('{CHANNEL}', '')" in sql.queries("postgres")["insert_job_recorded"]


def test_dialects_bind_the_same_parameters() -> None:
    sqlite, postgres = shared("sqlite"), shared("postgres")
    for name, text in sqlite.items():
        if name in sql.REPLACED["postgres"]:
            continue
        lite = set(re.findall(r"(?<!:):([A-Za-z_]\w*)", text))
        pg = set(re.findall(r"%\((\w+)\)s", postgres[name]))
        assert lite == pg, f"{name}: sqlite binds {sorted(lite)}, postgres {sorted(pg)}"


def test_dialects_have_the_same_migrations() -> None:
    assert [v for v, _ in sql.migrations("sqlite")] == [v for v, _ in sql.migrations("postgres")]


def test_named_params_become_pyformat_outside_casts_and_literals() -> None:
    text = "SELECT :a::text[], 'x:y''z :q', \"c:d\", 5 % 2, x::int WHERE b = :b_2"
    assert sql.to_pyformat(text) == (
        "SELECT %(a)s::text[], 'x:y''z :q', \"c:d\", 5 %% 2, x::int WHERE b = %(b_2)s"
    )


def test_dialects_define_the_same_fragments_and_no_query_keeps_a_placeholder() -> None:
    # A fragment is a piece of queries (sql.fragments), not a query: not in queries(), and
    # spliced into every query that names it before the dialect's parameter style.
    assert set(sql.fragments("sqlite")) == set(sql.fragments("postgres")) == {"due_job"}
    for dialect in ("sqlite", "postgres"):
        queries = sql.queries(dialect)
        assert not set(sql.fragments(dialect)) & set(queries)
        assert not [name for name, text in queries.items() if "{{" in text or "}}" in text]
        # vacuum.sql's single-brace {table} is its caller's to fill, not a fragment.
        assert "{table}" in queries["vacuum_table"]


def test_the_due_filter_is_written_once_per_dialect() -> None:
    """What the claim may take lives in due_job (due.sql): no query file repeats its terms,
    so a change to it is one change per dialect."""
    root = resources.files("errands.backends.sql")
    for dialect in ("sqlite", "postgres"):
        for term in ("deadline_at IS NULL OR deadline_at >", "expires_at IS NULL OR"):
            holding = sorted(
                entry.name
                for entry in root.joinpath(dialect).iterdir()
                if entry.name.endswith(".sql") and not entry.name.startswith("migration_")
                if term in entry.read_text()
            )
            assert holding == ["due.sql"], (dialect, term)
            assert term in sql.fragments(dialect)["due_job"]


FRAGMENT = "-- fragment: f\n-- Two terms.\nx = 1\n  AND y = :y\n"


@pytest.mark.parametrize("dialect", ["sqlite", "postgres"])
def test_a_fragment_is_spliced_at_its_placeholder_with_its_indentation(dialect: str) -> None:
    query = (
        "-- name: q\n-- One query.\nSELECT 1 FROM jobs\n    WHERE {{f}}\n      AND z = '{{f}}'\n"
    )
    assembled = sql.assemble(dialect, [("a.sql", FRAGMENT), ("b.sql", query)])
    assert assembled == {
        "q": sql.PARAMETER_STYLE[dialect](
            "SELECT 1 FROM jobs\n    WHERE x = 1\n      AND y = :y\n      AND z = '{{f}}'"
        )
    }


@pytest.mark.parametrize("dialect", ["sqlite", "postgres"])
@pytest.mark.parametrize(
    ("files", "error"),
    [
        ([FRAGMENT, "-- name: q\n-- Q.\nSELECT 1 WHERE {{f}} AND {{g}}"], "unknown fragment"),
        ([FRAGMENT, "-- name: q\n-- Q.\nSELECT 1"], "'f' is used by no query"),
        ([FRAGMENT, FRAGMENT + "\n-- name: q\n-- Q.\nSELECT 1 WHERE {{f}}"], "two files"),
        (["-- fragment: g\n-- G.\n{{f}}\n" + FRAGMENT, "-- name: q\n-- Q.\n{{g}}"], "holds"),
        ([FRAGMENT, "-- name: q\n-- Q.\nSELECT 1 WHERE {{f}} AND {{ f }}"], "outside a"),
    ],
    ids=["unknown", "unused", "twice", "nested", "stray"],
)
def test_a_bad_fragment_or_placeholder_fails_at_load(
    dialect: str, files: list[str], error: str
) -> None:
    with pytest.raises(ValueError, match=error):
        sql.assemble(dialect, [(f"{n}.sql", text) for n, text in enumerate(files)])
