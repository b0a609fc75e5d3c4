"""``errands demo``: a self-contained tour on a fresh SQLite file — no server needed.

The demo's tasks also run outside the demo, as the commands it prints suggest: this module's
``queue`` attribute (``errands worker --app errands.cli.demo:queue``, the module named by
``__name__``) is the demo's Queue, with the same tasks, built on ``$ERRANDS_DB``, else the
default demo file, when first read.

Sample tasks cover what a newcomer wants to see: fast jobs, flaky jobs that succeed on retry,
one that always fails with its own error code, an ``async def`` task, jobs scheduled a few
seconds ahead, and one cancelled before it ran. Backoffs are short (``fixed(0.2)``) so the
whole demo finishes in a few seconds.
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import sqlite3
import sys
import threading
import time
from typing import Any, TextIO

from ..context import JobContext
from ..core.backoff import fixed
from ..core.states import State
from ..errors import ConfigurationError, JobError
from ..queue import ENV_DB, Queue
from ..worker.loop import Worker
from . import output

DEMO_TYPES = frozenset(
    {
        "resize_image",
        "sync_inventory",
        "charge_card",
        "fetch_feed",
        "send_reminder",
        "inventory_report",
    }
)
DEMO_DB = "errands-demo.db"
# Scheduled jobs are due within 3 s; past this something is wrong, so stop and say so.
MAX_SECONDS = 30.0


def prepare(path: str) -> None:
    """Remove a previous demo database. A file that is not one is refused, never deleted:
    ``--db`` pointing at real data by mistake must not cost that data."""
    if os.path.isdir(path):
        raise ConfigurationError(f"{path} is a directory; give the demo a file path with --db")
    if os.path.exists(path):
        try:
            conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
            try:
                types = {r[0] for r in conn.execute("SELECT DISTINCT type FROM jobs")}
            finally:
                conn.close()
        except sqlite3.Error:
            types = {"?"}
        if not types <= DEMO_TYPES:
            raise ConfigurationError(
                f"{path} exists and is not an errands demo database, so the demo will not "
                "replace it; choose another file with --db or remove it yourself"
            )
    for suffix in ("", "-wal", "-shm"):
        try:
            os.remove(path + suffix)
        except FileNotFoundError:
            pass


def __getattr__(name: str) -> Queue:
    """``queue``: the demo's Queue for ``errands worker --app errands.cli.demo:queue``, built on
    first read (importing the module opens nothing) from ``$ERRANDS_DB``, else the demo file.
    It has the demo's tasks but not its periodic schedule, which the demo retired: a worker
    started later runs a retried job without bringing the schedule back."""
    if name != "queue":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    path = os.environ.get(ENV_DB) or DEMO_DB
    if "://" not in path and not os.path.exists(path):
        raise ConfigurationError(
            f"no demo database at {path}; run `errands demo` first, or set ${ENV_DB} to the "
            "file it made"
        )
    queue = build_queue(path, periodic=False)
    globals()["queue"] = queue  # one Queue per process, however often it is read
    return queue


def build_queue(path: str, *, periodic: bool = True) -> Queue:
    # durability="normal": a demo file need not survive power loss, and it is faster.
    q = Queue(path, durability="normal", poll_interval=0.1)
    quick = fixed(0.2)

    @q.task
    def resize_image(image_id: int, width: int) -> dict[str, Any]:
        time.sleep(random.uniform(0.0005, 0.003))
        return {"thumbnail": f"img-{image_id}-w{width}.jpg"}

    @q.task(max_attempts=5, backoff=quick)
    def sync_inventory(sku: str, ctx: JobContext, fail_first: int = 0) -> dict[str, Any]:
        # Fails its first `fail_first` attempts, like a flaky upstream API, then succeeds.
        if ctx.attempt <= fail_first:
            raise ConnectionError(f"warehouse API timed out syncing {sku} (attempt {ctx.attempt})")
        return {"sku": sku, "stock": random.randint(0, 40)}

    @q.task(max_attempts=3, backoff=quick)
    def charge_card(order_id: int, amount_cents: int) -> None:
        raise JobError(
            "PAYMENT:CARD_DECLINED",
            f"card for order {order_id} declined ({amount_cents} cents): insufficient funds",
        )

    @q.task(queue="feeds")
    async def fetch_feed(url: str) -> dict[str, Any]:
        await asyncio.sleep(random.uniform(0.005, 0.03))
        return {"url": url, "items": random.randint(1, 25)}

    @q.task(queue="emails")
    def send_reminder(user_id: int) -> str:
        return f"reminded user {user_id}"

    def inventory_report() -> dict[str, Any]:
        return {"generated_at": round(time.time(), 3)}

    if periodic:
        # The elected worker's scheduler enqueues it once per second-tick, exactly once however
        # many workers run (see `errands periodic`).
        q.periodic(every=1.0)(inventory_report)
    else:
        q.task(inventory_report)  # its past runs can still be retried
    return q


def enqueue_sample(q: Queue, total: int) -> tuple[int, int]:
    """Enqueue about ``total`` jobs; returns (scheduled, cancelled id)."""
    rnd = random.Random(7)
    n_feed = max(1, total * 15 // 100)
    n_sync = max(1, total * 20 // 100)
    n_sched = 5
    n_resize = max(1, total - n_feed - n_sync - n_sched - 1)
    items: list[Any] = [("resize_image", {"image_id": i, "width": 320}) for i in range(n_resize)]
    items += [
        # Every third sync is flaky: it fails once or twice before it succeeds.
        (
            "sync_inventory",
            {"sku": f"SKU-{i:04d}", "fail_first": rnd.choice([1, 2]) if i % 3 == 0 else 0},
        )
        for i in range(n_sync)
    ]
    items += [("fetch_feed", {"url": f"https://example.com/feed/{i}.xml"}) for i in range(n_feed)]
    items += [
        ("send_reminder", {"user_id": 100 + i}, {"delay": 1.0 + 2.0 * i / (n_sched - 1)})
        for i in range(n_sched)
    ]
    rnd.shuffle(items)
    q.enqueue_many(items)
    q.enqueue("charge_card", {"order_id": 1042, "amount_cents": 4999})
    # One reminder an hour ahead, cancelled by an operator before it ran.
    later = q.enqueue("send_reminder", {"user_id": 999}, delay=3600)
    q.cancel(later, actor="demo")
    return n_sched, later


def run_worker_until_done(q: Queue, out: TextIO) -> None:
    """One worker (on a thread, so this thread can watch) until nothing is queued or running —
    burst mode, except that it also waits for the jobs scheduled a few seconds ahead."""
    worker = Worker(q, concurrency=8, handle_signals=False)
    thread = threading.Thread(target=worker.run, name="errands-demo-worker")
    thread.start()
    start = time.monotonic()
    next_report = start + 0.5
    try:
        while True:
            left = _left(q)
            now = time.monotonic()
            if not left or now - start > MAX_SECONDS or not thread.is_alive():
                break
            if now >= next_report:
                _progress(worker, now - start, left, out)
                next_report = now + 0.5
            time.sleep(0.05)
    finally:
        # Retire the schedule before the worker stops: its scheduler could otherwise enqueue
        # one more tick that nobody runs, and the file would later look "overdue" to check.
        retired = retire_schedules(q)
        worker.stop()
        thread.join()
    # Then their rows, so nothing later reports them overdue (refused while a live worker
    # declares one: this one has stopped, and the burst below declares none).
    for name in retired:
        q.remove_periodic(name, actor="demo")
    # A tick enqueued just before the schedule was retired still runs, so the summary adds up.
    Worker(q, concurrency=8, burst=True, handle_signals=False).run()
    left = _left(q)
    _progress(worker, time.monotonic() - start, left, out)
    if left:
        print(f"  stopped after {MAX_SECONDS:.0f}s with {left} job(s) left", file=out)


def _left(q: Queue) -> int:
    counts = q.stats()["counts"]
    return int(counts[State.QUEUED.value] + counts[State.RUNNING.value])


def retire_schedules(q: Queue) -> list[str]:
    """Stop firing the demo's periodic schedules once the demo is done (the scheduler only
    fires schedules its Queue has), so no tick waits for a worker; their names."""
    names = sorted(q.schedules)
    for name in names:
        q.schedules.pop(name)
    return names


def _progress(worker: Worker, elapsed: float, left: int, out: TextIO) -> None:
    s = worker.summary
    print(
        f"  {elapsed:4.1f}s  {s.succeeded:4d} succeeded  {s.retried:3d} retries scheduled  "
        f"{s.failed} failed  {left:3d} still queued or running",
        file=out,
    )


def summarize(q: Queue, path: str, out: TextIO) -> None:
    stats = q.stats()
    print("\nJobs per state", file=out)
    output.table(["STATE", "JOBS"], [(s, n) for s, n in stats["counts"].items()], out)

    per_type: dict[str, dict[str, int]] = {}
    for job in q.jobs(limit=100_000):
        row = per_type.setdefault(job.type, {"jobs": 0, "attempts": 0})
        row["jobs"] += 1
        row["attempts"] += job.attempts
        row[job.status] = row.get(job.status, 0) + 1
    print("\nPer task type", file=out)
    output.table(
        ["TYPE", "JOBS", "ATTEMPTS", "SUCCEEDED", "FAILED", "CANCELLED"],
        [
            (
                t,
                r["jobs"],
                r["attempts"],
                r.get("succeeded", 0),
                r.get("failed", 0),
                r.get("cancelled", 0),
            )
            for t, r in sorted(per_type.items())
        ],
        out,
    )

    failed = q.jobs(status=State.FAILED.value, limit=1)
    if failed:
        job = failed[0]
        print(f"\nThe failed job: #{job.id} {job.type} {job.payload} → {job.error_code}", file=out)
        print("Attempts", file=out)
        output.attempts_table(q.attempts(job.id), out)
        print("Timeline", file=out)
        output.events_table(q.events(job.id), job.created_at, out)
    flaky = next(
        (j for j in q.jobs(type="sync_inventory", status="succeeded", limit=500) if j.attempts > 1),
        None,
    )
    cmd = f"{cli_name()} --db {path}"
    print("\nExplore further:", file=out)
    print(f"  {cmd} jobs --status failed", file=out)
    if failed:
        print(f"  {cmd} show {failed[0].id}", file=out)
    if flaky:
        print(f"  {cmd} show {flaky.id}        # failed, then succeeded on retry", file=out)
    print(f"  {cmd} stats", file=out)
    print(f"  {cmd} check", file=out)
    print(f"  {cmd} jobs --type inventory_report   # the periodic schedule's runs", file=out)
    print(f"  {cmd} retry {failed[0].id if failed else 'ID'}", file=out)
    # The retried job needs a worker with the demo's tasks: this module's Queue (by __name__,
    # so the line stays right wherever the module lives).
    print(
        f"  {ENV_DB}={path} {cli_name()} worker --app {__name__}:queue --burst   # runs it again",
        file=out,
    )
    print(f'  sqlite3 {path} "SELECT status, count(*) FROM jobs GROUP BY status"', file=out)


def cli_name() -> str:
    """How to type the command here: ``errands`` if it is on PATH, else the script beside this
    Python (e.g. ``.venv/bin/errands`` after ``make demo``), else ``python -m errands``."""
    beside = os.path.join(os.path.dirname(sys.executable), "errands")
    found = shutil.which("errands")
    if found and (not os.path.exists(beside) or os.path.samefile(found, beside)):
        return "errands"
    if os.path.exists(beside):
        rel = os.path.relpath(beside)
        return rel if not rel.startswith("..") else beside
    return f"{sys.executable} -m errands"


def start_dashboard(q: Queue, port: int, out: TextIO) -> Any:
    """The dashboard on a background thread (loopback, no token), or None if the web extra is
    not installed. Port ``port`` if free, else any free port: the URL printed is the real one."""
    try:
        from ..web.server import Background, bind, build, url_of
    except ConfigurationError as exc:  # errands[web] not installed
        print(f"(no dashboard: {exc})\n", file=out)
        return None
    app = build(q, host="127.0.0.1", token=None, read_only=False)
    try:
        sock = bind("127.0.0.1", port)
    except ConfigurationError:
        sock = bind("127.0.0.1", 0)
    server = Background(app, sock)
    server.start()
    print(f"Dashboard: {url_of(sock, '127.0.0.1')}  (open it to watch the jobs)\n", file=out)
    return server


def finish_dashboard(q: Queue, server: Any, path: str, keep: bool, out: TextIO) -> None:
    """Interactive runs keep the dashboard up with a worker until Ctrl-C, so a retry clicked
    in the browser runs; other runs (``make demo`` in a
    script or CI) stop it, so the demo ends by itself."""
    if server is None:
        return
    try:
        if keep:
            print(
                "\nThe dashboard stays up with a worker running: retry the failed job in the "
                "browser and watch it run. Press Ctrl-C to stop.",
                file=out,
            )
            out.flush()
            q.run_worker(concurrency=4)  # returns on SIGINT/SIGTERM (graceful shutdown)
        else:
            print(
                "\n(The dashboard stopped with the demo, which was not run from a terminal; "
                f"keep one open with `{cli_name()} --db {path} dashboard`.)",
                file=out,
            )
    finally:
        server.stop()


def run_demo(
    path: str,
    *,
    jobs: int = 300,
    out: TextIO | None = None,
    dashboard: bool = True,
    port: int = 8000,
    keep: bool | None = None,
) -> int:
    """``keep``: after the summary, keep the dashboard and a worker running until Ctrl-C
    (default: only when stdin and stdout are terminals)."""
    stream = out or sys.stdout
    if keep is None:
        keep = sys.stdin.isatty() and stream.isatty()
    prepare(path)
    started = time.monotonic()
    with build_queue(path) as q:
        print(f"errands demo — a fresh SQLite database at {path}\n", file=stream)
        web = start_dashboard(q, port, stream) if dashboard else None
        print(
            "Tasks: resize_image (fast), sync_inventory (flaky: fails, then succeeds on retry),\n"
            "       charge_card (always fails: PAYMENT:CARD_DECLINED), fetch_feed (async def),\n"
            "       send_reminder (scheduled 1-3 s ahead), inventory_report (periodic, every 1 s)",
            file=stream,
        )
        scheduled, cancelled = enqueue_sample(q, jobs)
        enqueued = sum(q.stats()["counts"].values())
        print(
            f"Enqueued {enqueued} jobs ({scheduled} scheduled 1-3 s ahead; job {cancelled} "
            "cancelled before it ran).\n",
            file=stream,
        )
        print("Running a worker (concurrency 8) until every job has finished:", file=stream)
        run_worker_until_done(q, stream)
        print(f"Done in {time.monotonic() - started:.1f}s.", file=stream)
        total = sum(q.stats()["counts"].values())
        ticks = total - enqueued
        print(
            f"{total} jobs in all: the {enqueued} above plus {ticks} inventory_report run(s) "
            "enqueued by the periodic schedule. The schedule was then removed from the demo "
            "file, so `errands check` on it stays truthful.",
            file=stream,
        )
        summarize(q, path, stream)
        finish_dashboard(q, web, path, keep, stream)
    return 0
