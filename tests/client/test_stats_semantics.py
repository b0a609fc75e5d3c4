"""What the last-hour "run" and "wait" figures mean — pinned, whatever computes them.

Run time is per attempt: from the handler's start to its outcome, for every attempt that ended
succeeded, failed or cancelled (``job_attempts``), never from the job's first start to its
end. A job cancelled while queued adds no run time of its own (its earlier attempts count as
the attempts they were); wait is from due to the start of a finished job's last attempt.
"""

from __future__ import annotations

import errands
from errands.backends.base import Cancelled, Retried, Succeeded
from helpers.ops import claim, enqueue
from helpers.support import EPOCH


def _fail_and_retry(
    q: errands.Queue, jtype: str, *, start: float, took: float, again: float
) -> int:
    """Claim the only job of ``jtype`` at ``start``; its handler fails after ``took`` seconds
    and a retry is scheduled at ``again``. Returns the job id."""
    j = claim(q, jtype, at=start)
    out = Retried(j.id, j.attempt, start, "UPSTREAM:DOWN", "no", None, again, again - start)
    assert q.backend.finish([out], "w1", start + took) == [True]
    return int(j.id)


def test_run_time_is_per_attempt_not_from_the_first_start(q: errands.Queue) -> None:
    # A: attempt 1 ran 1 s and failed (retry far ahead); then cancelled while queued, 29 min
    # later. The old figure counted 29 min of "run"; only the 1 s attempt is run time.
    enqueue(q, "a", at=EPOCH - 1800)
    a = _fail_and_retry(q, "a", start=EPOCH - 1800, took=1.0, again=EPOCH + 3600)
    assert q.backend.cancel([a], "test", EPOCH - 60).cancelled == [a]

    # B: attempt 1 failed after 1 s, retry due at EPOCH-200; attempt 2 started at EPOCH-150 (waited
    # 50 s) and succeeded after 2 s. Run = 2 s (that attempt), wait = 50 s.
    enqueue(q, "b", at=EPOCH - 1700)
    _fail_and_retry(q, "b", start=EPOCH - 1700, took=1.0, again=EPOCH - 200)
    j = claim(q, "b", at=EPOCH - 150)
    assert j.attempt == 2
    assert q.backend.finish([Succeeded(j.id, 2, EPOCH - 150, None)], "w1", EPOCH - 148) == [True]

    # C: cancelled while running: handler started at EPOCH-100 (due EPOCH-103), stopped 4 s later.
    enqueue(q, "c", at=EPOCH - 103)
    j = claim(q, "c", at=EPOCH - 100)
    assert q.backend.finish([Cancelled(j.id, 1, EPOCH - 100)], "w1", EPOCH - 96) == [True]

    hour = q.stats()["last_hour"]
    assert (hour["processed"], hour["succeeded"], hour["cancelled"]) == (3, 1, 2)
    # Runs, one per attempt: A 1 s, B 1 s and 2 s, C 4 s; never A's 29 minutes.
    # Nearest rank over four values: p50 is the 2nd (1 s), p95 the 4th (4 s).
    assert (hour["run_p50"], hour["run_p95"]) == (1.0, 4.0)
    # Waits: B 50 s, C 3 s (A none). Percentiles are read at histogram resolution: C's 3 s
    # falls in the (2.5, 5] bucket, reported as its upper bound; B's is capped at the max.
    assert (hour["wait_p50"], hour["wait_p95"]) == (5.0, 50.0)


def test_a_job_that_never_started_has_no_run_or_wait(q: errands.Queue) -> None:
    job_id = enqueue(q, "never", at=EPOCH - 100)
    assert q.backend.cancel([job_id], "test", EPOCH - 50).cancelled == [job_id]
    hour = q.stats()["last_hour"]
    assert hour["processed"] == 1 and hour["cancelled"] == 1
    assert hour["run_p95"] is None and hour["wait_p95"] is None
