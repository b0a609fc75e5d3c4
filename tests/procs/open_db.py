"""Child-process target for the concurrent-open test (spawned, so importable by name)."""

from __future__ import annotations

from typing import Any

import errands


def open_and_enqueue(path: str, barrier: Any, n: int) -> None:
    barrier.wait(timeout=120)  # every process opens the new file at the same moment
    with errands.Queue(path) as q:
        q.enqueue("opened", {"n": n})
