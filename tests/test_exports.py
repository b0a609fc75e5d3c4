"""The public surface: every name in ``errands.__all__`` exists, and the async / waiting /
middleware names of SPEC §4 are among them."""

from __future__ import annotations

import errands


def test_every_exported_name_exists() -> None:
    assert sorted(errands.__all__) == errands.__all__
    missing = [name for name in errands.__all__ if not hasattr(errands, name)]
    assert missing == []


def test_async_waiting_and_middleware_names_are_public() -> None:
    assert {"WaitTimeout", "Wakeups", "Middleware", "Enqueuing", "Execution"} <= set(
        errands.__all__
    )
    assert issubclass(errands.WaitTimeout, errands.ErrandsError)
    assert issubclass(errands.WaitTimeout, TimeoutError)
    for method in ("enqueue_async", "enqueue_many_async", "wait", "wait_async", "use", "aclose"):
        assert callable(getattr(errands.Queue, method))
    assert callable(errands.Task.enqueue_async)
