"""Shared builders for the dashboard tests: a queue with real jobs run by a real worker."""

from __future__ import annotations

from typing import Any

import errands


def populate(q: errands.Queue) -> dict[str, Any]:
    """Five succeeded jobs, three failed (``PAY:DECLINED``, one attempt each), two queued an
    hour ahead in queue ``mail``; run by a burst worker."""

    @q.task(max_attempts=1)
    def charge(n: int) -> None:
        raise errands.JobError("PAY:DECLINED", f"card {n} declined", retry=False)

    @q.task
    def resize(n: int) -> dict[str, int]:
        return {"n": n}

    @q.task(queue="mail")
    def remind(n: int) -> None:
        return None

    ok = [resize.enqueue(n=i) for i in range(5)]
    failed = [charge.enqueue(n=i) for i in range(3)]
    q.run_worker(burst=True, concurrency=2, handle_signals=False)
    queued = [q.enqueue("remind", {"n": i}, delay=3600) for i in range(2)]
    return {"ok": ok, "failed": failed, "queued": queued}
