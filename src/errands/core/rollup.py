"""Fixed-bound histograms for wait and run times, so rolled-up hours can be merged.

``job_stats_hourly.wait_hist`` and ``run_hist`` are JSON arrays of counts, one per bound in
``BOUNDS`` plus one overflow bucket: ``hist[i]`` counts values ``<= BOUNDS[i]`` (and above the
previous bound); the last entry counts values above every bound. Adding arrays element-wise
merges hours, batches or queues; percentiles are then estimated to within a bucket. The same
bounds are the Prometheus histogram buckets.
"""

from __future__ import annotations

import bisect
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

HOUR = 3600.0
MINUTE = 60.0
# How long job_stats_minutely keeps its rows (prune drops older ones): windows up to a week
# are answered from them; longer ones count the rows still in the table.
MINUTES_KEPT = 8 * 86400.0

# Seconds: fine below a second (fast handlers), coarse up to a day (long waits).
BOUNDS: tuple[float, ...] = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
    1800.0,
    3600.0,
    7200.0,
    21600.0,
    86400.0,
)


def bucket(value: float) -> int:
    return bisect.bisect_left(BOUNDS, value)


def empty() -> list[int]:
    return [0] * (len(BOUNDS) + 1)


def merge(a: Sequence[int], b: Sequence[int]) -> list[int]:
    if len(a) != len(b):  # written by another version of the bounds: keep the newer shape
        return list(b) if len(b) > len(a) else list(a)
    return [x + y for x, y in zip(a, b, strict=True)]


def load(text: Any) -> list[int]:
    """A stored histogram (JSON text, jsonb list, or NULL) as a list of counts."""
    if text is None:
        return empty()
    value = json.loads(text) if isinstance(text, str | bytes) else text
    return [int(v) for v in value] if isinstance(value, list) else empty()


def dump(hist: Sequence[int]) -> str:
    return json.dumps(list(hist), separators=(",", ":"))


def hour_of(ts: float) -> float:
    return ts - ts % HOUR


def minute_of(ts: float) -> float:
    return ts - ts % MINUTE


@dataclass(slots=True)
class Figures:
    """Count, sums, maxima and histograms of wait and run times for one group of jobs."""

    count: int = 0
    wait_sum: float = 0.0
    wait_max: float = 0.0
    run_sum: float = 0.0
    run_max: float = 0.0
    wait_hist: list[int] = field(default_factory=empty)
    run_hist: list[int] = field(default_factory=empty)

    def add(self, wait: float | None, run: float | None) -> None:
        """One finished job; wait/run are None when it never started (cancelled queued)."""
        self.count += 1
        if wait is not None:
            wait = max(wait, 0.0)
            self.wait_sum += wait
            self.wait_max = max(self.wait_max, wait)
            self.wait_hist[bucket(wait)] += 1
        if run is not None:
            run = max(run, 0.0)
            self.run_sum += run
            self.run_max = max(self.run_max, run)
            self.run_hist[bucket(run)] += 1

    def merged(self, other: Figures) -> Figures:
        return Figures(
            self.count + other.count,
            self.wait_sum + other.wait_sum,
            max(self.wait_max, other.wait_max),
            self.run_sum + other.run_sum,
            max(self.run_max, other.run_max),
            merge(self.wait_hist, other.wait_hist),
            merge(self.run_hist, other.run_hist),
        )


def durations(
    run_at: float | None, started_at: float | None, finished_at: float | None
) -> tuple[float | None, float | None]:
    """(wait, run) of a finished job: due → started of its last attempt, started → finished."""
    if started_at is None:
        return None, None
    wait = None if run_at is None else started_at - run_at
    run = None if finished_at is None else finished_at - started_at
    return wait, run


def percentile(exact: Sequence[float], hist: Sequence[int], cap: float, p: float) -> float | None:
    """The p-quantile (0 < p <= 1, nearest rank) of exact values plus histogram counts.

    Histogram counts stand at their bucket's upper bound (capped by ``cap``, the known maximum),
    so with no rolled-up data the answer is exact and with some it errs upward by at most one
    bucket.
    """
    weighted: list[tuple[float, int]] = [(v, 1) for v in exact]
    for i, n in enumerate(hist):
        if n:
            upper = BOUNDS[i] if i < len(BOUNDS) else cap
            weighted.append((min(upper, cap), n))
    total = sum(n for _, n in weighted)
    if total == 0:
        return None
    weighted.sort()
    rank = max(1, math.ceil(p * total - 1e-9))  # nearest rank; the epsilon absorbs float drift
    seen = 0
    for value, n in weighted:
        seen += n
        if seen >= rank:
            return value
    return weighted[-1][0]


def cumulative(hists: Iterable[Sequence[int]]) -> list[int]:
    """Prometheus-style cumulative bucket counts of merged histograms (last = +Inf)."""
    total = empty()
    for h in hists:
        total = merge(total, h)
    out: list[int] = []
    running = 0
    for n in total:
        running += n
        out.append(running)
    return out
