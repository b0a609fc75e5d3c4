"""A worker process for the multi-process test: ``drain_worker.py DB SIGNAL_DIR``.

Says it is ready, waits for the go file (so both workers start together), drains the queue
in burst mode and prints its summary as JSON."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

# Run as a script, it imports its sibling by file name; mypy checks the tests as one tree, where
# the same file is procs.recording_tasks.
if TYPE_CHECKING:
    from procs.recording_tasks import build
else:
    from recording_tasks import build


def main() -> int:
    db, signals = sys.argv[1], Path(sys.argv[2])
    (signals / f"ready-{os.getpid()}").touch()
    deadline = time.monotonic() + 120
    while not (signals / "go").exists():
        if time.monotonic() > deadline:
            print("never told to go", file=sys.stderr)
            return 3
        time.sleep(0.01)
    q = build(db)
    try:
        summary = q.run_worker(concurrency=4, burst=True)
    finally:
        q.close()
    print(json.dumps({"pid": os.getpid(), "claimed": summary.claimed, "ok": summary.succeeded}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
