"""Both dialects define the same named queries, so every shared verb finds its query on both."""

from __future__ import annotations

import re

from errands.backends import sql


def test_dialects_define_the_same_query_names() -> None:
    sqlite, postgres = set(sql.queries("sqlite")), set(sql.queries("postgres"))
    assert sqlite - postgres == set(), "queries missing from sql/postgres"
    assert postgres - sqlite == set(), "queries missing from sql/sqlite"


def test_dialects_bind_the_same_parameters() -> None:
    sqlite, postgres = sql.queries("sqlite"), sql.queries("postgres")
    for name, text in sqlite.items():
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
