"""A worker in its own process for the cross-process wait tests: ``wait_worker.py DB``.

``poll_interval`` is 30 s, so a job it picks up quickly was found through a wake-up, and it
records outcomes as any worker does. SIGTERM stops it gracefully (exit status 0)."""

from __future__ import annotations

import sys

import errands


def main() -> int:
    q = errands.Queue(sys.argv[1], poll_interval=30)

    @q.task(max_attempts=3, backoff=errands.fixed(0))
    def flaky(fail_times: int, ctx: errands.JobContext) -> dict[str, int]:
        if ctx.attempt <= fail_times:
            raise RuntimeError(f"failing attempt {ctx.attempt} on purpose")
        return {"attempt": ctx.attempt}

    try:
        q.run_worker(concurrency=2)
    finally:
        q.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
