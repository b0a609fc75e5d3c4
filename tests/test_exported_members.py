"""The public surface is explicit: ``errands.__all__`` lists exactly the names the package
defines at its top level (as httpx's tests/test_exported_members.py), and each is importable."""

from __future__ import annotations

import types

import errands
import errands.testing

# Dunder names that are part of the surface on purpose.
PUBLIC_DUNDERS = {"__version__"}


def public_names(module: types.ModuleType) -> list[str]:
    """Top-level names a user can reach, minus submodules (errands.queue and the like are
    attributes only because the package imports them)."""
    return sorted(
        name
        for name, value in vars(module).items()
        if (not name.startswith("_") or name in PUBLIC_DUNDERS)
        and not isinstance(value, types.ModuleType)
    )


def test_all_lists_every_public_name_sorted() -> None:
    assert errands.__all__ == public_names(errands)


def test_every_exported_name_resolves() -> None:
    for name in errands.__all__:
        assert getattr(errands, name) is not None, name
    namespace: dict[str, object] = {}
    exec("from errands import *", namespace)
    assert sorted(k for k in namespace if k != "__builtins__") == sorted(errands.__all__)


def test_the_testing_module_exports_its_own_helpers() -> None:
    assert errands.testing.__all__ == ["FrozenClock", "drain", "eager"]
    # exactly what the module defines (not what it imports), as docs/testing.md lists them
    defined = [
        name
        for name in public_names(errands.testing)
        if getattr(getattr(errands.testing, name), "__module__", None) == "errands.testing"
    ]
    assert defined == errands.testing.__all__


def test_async_waiting_and_middleware_names_are_public() -> None:
    assert {"WaitTimeout", "Wakeups", "Middleware", "Enqueuing", "Execution"} <= set(
        errands.__all__
    )
    assert issubclass(errands.WaitTimeout, errands.ErrandsError)
    assert issubclass(errands.WaitTimeout, TimeoutError)
    for method in ("enqueue_async", "enqueue_many_async", "wait", "wait_async", "use", "aclose"):
        assert callable(getattr(errands.Queue, method))
    assert callable(errands.Task.enqueue_async)
