#!/usr/bin/env python3
"""The dashboard's pages on a big SQLite file: server time per page, and with ``--browser``
the time a real chromium takes to load each one.

    .venv/bin/python scripts/bench_dashboard.py [--jobs 1000000] [--db PATH] [--browser]
    .venv/bin/python scripts/bench_dashboard.py --postgres postgresql://postgres@127.0.0.1/postgres

With ``--postgres SERVER_URL`` the same jobs go into a fresh database ``errands_dash_bench``
(or ``--pg-name``) on that server (dropped and made again on each run).

Builds (unless ``--db`` names an existing file) a file holding ``--jobs`` jobs and
``--activity`` operator actions (default 100,000) written with
plain SQL over the last 7 days: 80 % succeeded, 8 % failed (60 error groups, each with a
message), 2 % cancelled, 10 % queued (half due later; a tenth after one attempt, whose row
in ``job_attempts`` is written too: failed, or for a tenth of them snoozed and due within two
hours), a few running; then recounts the figures as errands' own writes would have kept them.
Each page is asked for through Starlette's TestClient (in-process: the server's time, no
network) by a fresh app (nothing cached: the first view) and then five times more; the
first time and the median of the five are printed. With ``--browser``, each page is loaded by
chromium from ``errands dashboard`` and the
navigation's load time is printed (the first and the median of three).
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

import errands

BUILD = [
    """WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < :count)
    INSERT INTO jobs (id, queue, type, payload, status, priority, attempts, max_attempts,
                      run_at, created_at, started_at, finished_at, worker_id, error_code,
                      error_detail)
    SELECT i,
           CASE i % 4 WHEN 0 THEN 'mail' WHEN 1 THEN 'reports' ELSE 'default' END,
           'task_' || (i % 12),
           '{"order": ' || i || ', "note": "customer ' || (i % 9973) || '"}',
           CASE WHEN i % 50 = 0 THEN 'cancelled'
                WHEN i % 100 < 8 THEN 'failed'
                WHEN i % 100 >= 90 AND i > :count - 100 THEN 'running'
                WHEN i % 100 >= 90 THEN 'queued'
                ELSE 'succeeded' END,
           0,
           CASE WHEN i % 100 >= 90 AND i % 10 = 1 THEN 1
                WHEN i % 100 >= 90 THEN 0 ELSE 1 END,
           5,
           CASE WHEN i % 100 >= 95 THEN :now + 60 + i % 7200
                ELSE :t0 + i * :step END,
           :t0 + i * :step,
           CASE WHEN i % 100 >= 90 AND i <= :count - 100 THEN NULL
                ELSE :t0 + i * :step + 0.5 + (i % 7) END,
           CASE WHEN i % 100 >= 90 THEN NULL
                ELSE :t0 + i * :step + 1.0 + (i % 7) + (i % 3) END,
           CASE WHEN i % 100 >= 90 AND i <= :count - 100 THEN NULL ELSE 'w-' || (i % 8) END,
           CASE WHEN i % 50 = 0 THEN 'CANCELLED:BY_USER'
                WHEN i % 100 < 8 OR (i % 100 >= 90 AND i % 10 = 1)
                THEN 'APP:E' || (i % 5) ELSE NULL END,
           CASE WHEN i % 100 < 8 OR (i % 100 >= 90 AND i % 10 = 1)
                THEN 'upstream said no to order ' || i ELSE NULL END
    FROM n""",
    # Running jobs need a lease; queued ones carry no finish.
    """UPDATE jobs SET lease_expires_at = :now + 60, heartbeat_at = :now
       WHERE status = 'running'""",
]
# The queued jobs attempted once get their attempt row: a tenth of them snoozed (due again
# within the next two hours, no error), the rest failed with the job's error.
ATTEMPTS = [
    """UPDATE jobs SET error_code = NULL, error_detail = NULL, run_at = :now + 60 + id % 7200
       WHERE status = 'queued' AND attempts = 1 AND id % 1000 = 391""",
    """INSERT INTO job_attempts (job_id, attempt, worker_id, started_at, finished_at, status,
                                error_code, error_detail)
    SELECT id, 1, 'w-' || (id % 8), created_at + 0.5, created_at + 1.0,
           CASE WHEN id % 1000 = 391 THEN 'snoozed' ELSE 'failed' END, error_code, error_detail
    FROM jobs WHERE status = 'queued' AND attempts = 1""",
]
PG_ATTEMPTS = [
    """UPDATE jobs SET error_code = NULL, error_detail = NULL,
       run_at = to_timestamp(%(now)s + 60 + id %% 7200)
       WHERE status = 'queued' AND attempts = 1 AND id %% 1000 = 391""",
    """INSERT INTO job_attempts (job_id, attempt, worker_id, started_at, finished_at, status,
                                error_code, error_detail)
    SELECT id, 1, 'w-' || (id %% 8), created_at + interval '0.5 second',
           created_at + interval '1 second',
           CASE WHEN id %% 1000 = 391 THEN 'snoozed' ELSE 'failed' END, error_code, error_detail
    FROM jobs WHERE status = 'queued' AND attempts = 1""",
]
# The operator activity log: :count actions over the same week, by eight actors and nine
# actions, as a busy team's dashboard, scripts and CLI would leave them.
ACTIVITY = """WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < :count)
    INSERT INTO operator_actions (id, at, actor, action, target, count, filter, detail)
    SELECT i, :t0 + i * :step,
           CASE i % 8 WHEN 0 THEN 'cli:root' WHEN 1 THEN 'api' ELSE 'token:ops-' || (i % 8) END,
           CASE i % 9 WHEN 0 THEN 'retry' WHEN 1 THEN 'cancel' WHEN 2 THEN 'delete'
                WHEN 3 THEN 'pause' WHEN 4 THEN 'resume' WHEN 5 THEN 'limit_set'
                WHEN 6 THEN 'run_now' WHEN 7 THEN 'priority' ELSE 'prune' END,
           'job ' || (i * 7), 1 + i % 50, NULL, '{"note": "bench"}'
    FROM n"""
PAGES = [
    "/",
    "/?window=7d",
    "/?type=task_3",
    "/?window=7d&type=task_3",
    "/?window=7d&queue=mail",
    "/?window=7d&type=task_3&queue=reports",
    "/jobs",
    "/jobs?status=failed",
    "/jobs?status=queued&queue=mail",
    "/jobs?view=scheduled",
    "/jobs?view=retrying",
    "/jobs?view=running",
    "/jobs?view=dead",
    "/jobs?q=customer%20977",
    "/jobs?q=APP:E3",
    "/jobs/{middle}",
    "/failures",
    "/failures?window=7d",
    "/queues",
    "/workers",
    "/periodic",
    "/jobs?view=snoozed",
    "/bulk/confirm?action=delete&status=failed",
    "/bulk/confirm?action=priority&status=queued",
    "/activity",
    "/activity?actor=cli:root",
    "/activity?action=prune",
    "/api/admin/activity",
    "/api/admin/jobs?q=customer%20977",
    "/api/admin/charts?window=7d&type=task_3",
    "/api/admin/errors?window=7d",
]


def build(path: str, jobs: int, activity: int) -> float:
    errands.Queue(path).close()
    start = time.perf_counter()
    now = time.time()
    step = 7 * 86400 / jobs
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("BEGIN IMMEDIATE")
        bind = {"count": jobs, "t0": now - 7 * 86400, "step": step, "now": now}
        for statement in BUILD:
            conn.execute(statement, bind)
        for statement in ATTEMPTS:
            conn.execute(statement, {"now": now})
        if activity:
            conn.execute(
                ACTIVITY, {"count": activity, "t0": now - 7 * 86400, "step": 7 * 86400 / activity}
            )
        conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("ANALYZE")
    finally:
        conn.close()
    with errands.Queue(path) as q:
        q.recount_figures()
    return time.perf_counter() - start


# The same jobs for PostgreSQL: the SELECT above over generate_series, times built as epoch
# seconds and stored as timestamptz (psycopg's parameters: a literal % is written %%).
_SELECT = (
    BUILD[0]
    .split("SELECT i,", 1)[1]
    .replace(" % ", " %% ")
    .replace("FROM n", "FROM generate_series(1, :count) AS n(i)")
)
for _name in ("count", "t0", "step", "now"):
    _SELECT = _SELECT.replace(f":{_name}", f"%({_name})s")
PG_BUILD = (
    "INSERT INTO jobs (id, queue, type, payload, status, priority, attempts, max_attempts, "
    "run_at, created_at, started_at, finished_at, worker_id, error_code, error_detail) "
    "SELECT i, queue, type, CAST(payload AS jsonb), status, priority, attempts, max_attempts, "
    "to_timestamp(run_at), to_timestamp(created_at), to_timestamp(started_at), "
    "to_timestamp(finished_at), worker_id, error_code, error_detail FROM (SELECT i,"
    + _SELECT
    + ") AS built(i, queue, type, payload, status, priority, attempts, max_attempts, run_at, "
    "created_at, started_at, finished_at, worker_id, error_code, error_detail)"
)


def build_postgres(
    server: str,
    jobs: int,
    activity: int,
    reuse: bool = False,
    name: str = "errands_dash_bench",
) -> tuple[str, float]:
    """A fresh database ``name`` on ``server`` holding ``jobs`` jobs (with ``reuse``, the one
    a previous run left, if any: migrated, not rebuilt)."""
    import psycopg
    from psycopg import sql

    url = server.rsplit("/", 1)[0] + "/" + name
    if reuse:
        with psycopg.connect(server, autocommit=True) as admin:
            found = admin.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", (name,)
            ).fetchone()
        if found:
            errands.Queue(url).close()
            return url, 0.0
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    errands.Queue(url).close()
    start = time.perf_counter()
    now = time.time()
    bind = {"count": jobs, "t0": now - 7 * 86400, "step": 7 * 86400 / jobs, "now": now}
    with psycopg.connect(url) as conn:
        conn.execute(PG_BUILD, bind)
        conn.execute(
            "UPDATE jobs SET lease_expires_at = to_timestamp(%(now)s + 60), "
            "heartbeat_at = to_timestamp(%(now)s) WHERE status = 'running'",
            bind,
        )
        for statement in PG_ATTEMPTS:
            conn.execute(statement, bind)
        conn.execute("SELECT setval(pg_get_serial_sequence('jobs', 'id'), %(count)s)", bind)
        if activity:
            conn.execute(
                "INSERT INTO operator_actions (id, at, actor, action, target, count, detail) "
                "SELECT i, to_timestamp(%(t0)s + i * %(step)s), "
                "CASE i %% 8 WHEN 0 THEN 'cli:root' WHEN 1 THEN 'api' "
                "ELSE 'token:ops-' || (i %% 8) END, "
                "(ARRAY['prune', 'retry', 'cancel', 'delete', 'pause', 'resume', 'limit_set', "
                "'run_now', 'priority'])[i %% 9 + 1], 'job ' || (i * 7), 1 + i %% 50, "
                '\'{"note": "bench"}\'::jsonb FROM generate_series(1, %(count)s) AS n(i)',
                {"count": activity, "t0": bind["t0"], "step": 7 * 86400 / activity},
            )
            conn.execute(
                "SELECT setval(pg_get_serial_sequence('operator_actions', 'id'), %(count)s)",
                {"count": activity},
            )
    with errands.Queue(url) as q:
        q.recount_figures()
    # As autovacuum would soon after a load this size (the figures included: planned on an
    # empty table's statistics, the week's minutes were sorted on disk).
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
    return url, time.perf_counter() - start


def server_times(path: str) -> dict[str, tuple[float, float]]:
    """Per page: (the first request of a fresh app, nothing cached; the median of 5 more)."""
    from starlette.testclient import TestClient

    from errands.web import create_app

    out = {}
    with errands.Queue(path) as q:
        middle = q.jobs(limit=1)[0].id // 2
        for page in (p.format(middle=middle) for p in PAGES):
            c = TestClient(create_app(q, allowed_hosts=["testserver"]))
            took = []
            for _ in range(6):
                start = time.perf_counter()
                r = c.get(page)
                took.append(time.perf_counter() - start)
                if r.status_code != 200:
                    raise RuntimeError(f"{page}: {r.status_code} {r.text[:200]}")
            out[page] = (took[0] * 1000, statistics.median(took[1:]) * 1000)
    return out


def browser_times(path: str) -> dict[str, tuple[float, float]]:
    from playwright.sync_api import sync_playwright

    with socket_port() as port:
        proc = subprocess.Popen(
            [sys.executable, "-m", "errands", "dashboard", "--db", path, "--port", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                urllib.request.urlopen(base + "/healthz", timeout=2).close()
                break
            except OSError:
                time.sleep(0.1)
        out = {}
        with sync_playwright() as p:
            b = p.chromium.launch(
                executable_path="/usr/bin/chromium", args=["--no-sandbox", "--headless"]
            )
            page = b.new_page(viewport={"width": 1366, "height": 900})
            for url in PAGES:
                url = url.format(middle=10)
                if url.startswith("/api"):
                    continue
                took = []
                for _ in range(3):
                    page.goto(base + url)
                    took.append(
                        page.evaluate(
                            "(() => { const n = performance.getEntriesByType('navigation')[0];"
                            " return n.loadEventEnd - n.startTime; })()"
                        )
                    )
                out[url] = (took[0], statistics.median(took))
            b.close()
        return out
    finally:
        proc.terminate()
        proc.wait(timeout=30)


class socket_port:
    def __enter__(self) -> int:
        import socket

        self.s = socket.socket()
        self.s.bind(("127.0.0.1", 0))
        return int(self.s.getsockname()[1])

    def __exit__(self, *exc: object) -> None:
        self.s.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=1_000_000)
    ap.add_argument("--db")
    ap.add_argument(
        "--activity", type=int, default=100_000, help="operator actions in the activity log"
    )
    ap.add_argument("--browser", action="store_true")
    ap.add_argument("--postgres", metavar="SERVER_URL")
    ap.add_argument("--reuse", action="store_true", help="PostgreSQL: keep a previous build")
    ap.add_argument(
        "--pg-name", default="errands_dash_bench", help="PostgreSQL: the database to (re)build"
    )
    args = ap.parse_args()
    if args.postgres:
        path, took = build_postgres(
            args.postgres, args.jobs, args.activity, args.reuse, args.pg_name
        )
        print(f"building {args.jobs:,} jobs in {path}: {took:.1f} s")
    else:
        path = args.db or os.path.join(tempfile.mkdtemp(), "dash.db")
        if not os.path.exists(path) or os.path.getsize(path) == 0:
            took = build(path, args.jobs, args.activity)
            print(f"building {args.jobs:,} jobs in {path}: {took:.1f} s")
    print("server (TestClient: first request of a fresh app, nothing cached | median of 5 more):")
    for page, (first, ms) in server_times(path).items():
        print(f"  {first:8.1f} | {ms:8.1f} ms  {page}")
    if args.browser:
        print("chromium (navigation to load event: first | median of 3):")
        for page, (first, ms) in browser_times(path).items():
            print(f"  {first:8.1f} | {ms:8.1f} ms  {page}")


if __name__ == "__main__":
    main()
