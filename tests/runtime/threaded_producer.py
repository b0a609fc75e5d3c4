"""A producer process for the SIGKILL durability test: THREADS threads call ``enqueue`` in a
loop; after each call returns, its id is appended to that thread's file with one write()
and an fsync, so every id in the files is one an ``enqueue`` call acknowledged.

    python threaded_producer.py DB_URL OUT_DIR THREADS
"""

from __future__ import annotations

import os
import sys
import threading

import errands


def main() -> None:
    url, out, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
    q = errands.Queue(url, busy_timeout=30)

    def produce(t: int) -> None:
        fd = os.open(os.path.join(out, f"acked-{t}"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        n = 0
        while True:
            job_id = q.enqueue("t", {"thread": t, "n": n})
            os.write(fd, f"{job_id}\n".encode())
            os.fsync(fd)
            n += 1

    for t in range(threads):
        threading.Thread(target=produce, args=(t,), daemon=True).start()
    print("started", flush=True)
    threading.Event().wait()  # until SIGKILL


if __name__ == "__main__":
    main()
