"""Both dialects define the same named queries, so every shared verb finds its query on both."""

from __future__ import annotations

import re

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
