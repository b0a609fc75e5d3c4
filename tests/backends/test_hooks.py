"""The hooks one noun of the SQL backend implements for the others (declared in
``host.SQLHost`` with ``raise NotImplementedError``) are bound explicitly on ``SQLBackend``
to their one implementation, so which mixin answers never depends on the mixins' order."""

from __future__ import annotations

import ast
import inspect
import textwrap

from errands.backends import host, sqlbase
from errands.backends.sqlite import SQLiteBackend


def declared_only() -> set[str]:
    """SQLHost's methods whose body raises NotImplementedError: a noun must implement them."""
    names = set()
    for name, fn in vars(host.SQLHost).items():
        if not callable(fn):
            continue
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
        if any(
            isinstance(n, ast.Raise)
            and isinstance(n.exc, ast.Name | ast.Call)
            and "NotImplementedError" in ast.dump(n.exc)
            for n in ast.walk(tree)
        ):
            names.add(name)
    return names


def test_every_noun_implemented_hook_is_bound_on_the_backend() -> None:
    from errands.backends.postgres import PostgresBackend

    hooks = declared_only()
    assert {"_release", "_revive"} <= hooks
    by_nouns = set()
    for name in sorted(hooks):
        nouns = [
            base.__name__
            for base in sqlbase.SQLBackend.__mro__[1:]
            if base is not host.SQLHost and name in vars(base)
        ]
        if not nouns:  # a dialect's hook: each dialect implements it (or a mixin of its own)
            for dialect in (SQLiteBackend, PostgresBackend):
                own = [c for c in dialect.__mro__ if c not in sqlbase.SQLBackend.__mro__]
                assert any(name in vars(c) for c in own), f"{dialect.__name__} lacks {name}"
            continue
        by_nouns.add(name)
        assert len(nouns) == 1, f"{name} is implemented by {nouns}: one noun owns a hook"
        assert vars(sqlbase.SQLBackend).get(name) is vars(getattr(sqlbase, nouns[0]))[name], (
            f"bind {name} = {nouns[0]}.{name} on SQLBackend"
        )
    assert by_nouns == {
        "_release",
        "_revive",
        "_claim_limited",
        "_claim_rows",
        "_handler_starts",
        "_suspend",
    }
