"""Fault injection for crash tests: ``ERRANDS_FAULT=claim.before_commit`` makes the process
exit abruptly (``os._exit``, no cleanup) the first time it reaches that point.

Read once at import, so production pays one set lookup per write point.
"""

from __future__ import annotations

import os

FAULT_EXIT_CODE = 86
_ARMED = frozenset(filter(None, os.environ.get("ERRANDS_FAULT", "").split(",")))


def point(name: str) -> None:
    if _ARMED and name in _ARMED:
        os._exit(FAULT_EXIT_CODE)
