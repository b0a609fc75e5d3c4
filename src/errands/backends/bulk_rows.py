"""How ``enqueue_many``'s jobs are cut into statements: chunks of bounded rows and payload
text, and runs of alike jobs inside a chunk (jobs.py's ``_insert_batched_steps``).

The fields are read and compared in C (``attrgetter``, ``list.count``, ``max``): a bulk of
small payloads of one type — the common ``enqueue_many`` — costs no Python step per job here.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from operator import attrgetter

from .base import NewJob

LIMIT_KEY = attrgetter("limit_key")
UNIQUE_KEY = attrgetter("unique_key")
HEADERS = attrgetter("headers")
RULES = attrgetter("rules")  # time rules: written per row
_ALIKE = attrgetter(
    "queue", "type", "priority", "max_attempts", "run_at", "limit_key", "limit_group"
)
_PAYLOAD = attrgetter("payload")


def alike_runs(chunk: Sequence[NewJob], run_min: int) -> list[Sequence[NewJob]] | None:
    """The chunk cut into runs of consecutive jobs that differ only in payload (the common
    ``enqueue_many``: one type, its defaults, due now), or None when the runs are shorter
    than ``run_min`` on average: one statement per run then costs more than ``insert_jobs``'
    per-row field extraction, which a run's statement (``insert_jobs_alike``) saves (SQLite:
    ~8.7 -> ~5.7 µs per job). The common chunk, one run, is found with one ``list.count``."""
    keys = list(map(_ALIKE, chunk))
    if keys.count(keys[0]) == len(keys):
        return [chunk]
    cuts = [i for i in range(1, len(keys)) if keys[i] != keys[i - 1]]
    if (len(cuts) + 1) * run_min > len(chunk):
        return None
    starts = [0, *cuts]
    return [chunk[a:b] for a, b in zip(starts, [*cuts, len(chunk)], strict=True)]


def chunks(jobs: Sequence[NewJob], rows: int, size_max: int) -> Iterator[Sequence[NewJob]]:
    """``jobs`` cut into statements of at most ``rows`` rows and about ``size_max``
    characters of payload text (one payload over it goes alone). When no ``rows`` slice can
    reach ``size_max`` (the common bulk of small payloads: its longest payload tells), the
    cuts are plain slices."""
    if jobs and max(map(len, map(_PAYLOAD, jobs))) * rows <= size_max:
        for start in range(0, len(jobs), rows):
            yield jobs[start : start + rows]
        return
    start, size = 0, 0
    for i, job in enumerate(jobs):
        size += len(job.payload)
        if i - start >= rows or (size > size_max and i > start):
            yield jobs[start:i]
            start, size = i, len(job.payload)
    yield jobs[start:]
