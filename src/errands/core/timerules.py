"""The time rules one job was enqueued with (docs/flow-control.md), as a job carries them to
its row: float seconds each, None when not given. One value so a plain job carries one None."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TimeRules:
    """``unique_for``: how long the job's unique_key stays taken after it succeeded."""

    unique_for: float | None = None
