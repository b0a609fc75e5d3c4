-- errands schema version 1 (SQLite). Timestamps are unix epoch seconds as REAL, UTC.
-- Users query these tables directly, so table and column names are public (docs/reference/schema.md).

-- AUTOINCREMENT: ids keep increasing even after the newest rows are pruned, so an id is
-- never reused in logs, events or links.
CREATE TABLE jobs (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    queue            TEXT    NOT NULL DEFAULT 'default',
    type             TEXT    NOT NULL,
    payload          TEXT    NOT NULL DEFAULT '{}',
    status           TEXT    NOT NULL DEFAULT 'queued'
                     CHECK (status IN ('queued', 'running', 'succeeded', 'failed', 'cancelled')),
    priority         INTEGER NOT NULL DEFAULT 0,
    attempts         INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    max_attempts     INTEGER NOT NULL DEFAULT 20 CHECK (max_attempts >= 1),
    run_at           REAL    NOT NULL,
    created_at       REAL    NOT NULL,
    started_at       REAL,
    finished_at      REAL,
    worker_id        TEXT,
    heartbeat_at     REAL,
    lease_expires_at REAL,
    unique_key       TEXT,
    error_code       TEXT,
    error_detail     TEXT,
    result           TEXT,
    payload_ref      TEXT,
    result_ref       TEXT,
    cancel_requested INTEGER NOT NULL DEFAULT 0 CHECK (cancel_requested IN (0, 1))
);

-- The claim's index: partial, so finished rows never slow it, in the claim's ORDER BY.
CREATE INDEX jobs_due ON jobs (priority DESC, run_at, id) WHERE status = 'queued';
-- unique_key dedups only against active jobs.
CREATE UNIQUE INDEX jobs_unique_active ON jobs (unique_key)
    WHERE unique_key IS NOT NULL AND status IN ('queued', 'running');
-- Rescue (expired leases) and "oldest running" questions.
CREATE INDEX jobs_running ON jobs (lease_expires_at) WHERE status = 'running';
-- Counts per state, queue and type (covering).
CREATE INDEX jobs_status_queue_type ON jobs (status, queue, type);
-- Retention: finished rows by age.
CREATE INDEX jobs_finished ON jobs (status, finished_at) WHERE finished_at IS NOT NULL;
-- Top error codes by type over a window (answered from the index alone), `jobs --error-code`.
CREATE INDEX jobs_error_code ON jobs (error_code, type, finished_at) WHERE error_code IS NOT NULL;
-- "Oldest due queued job" and the worker's next wake-up: a range on run_at over queued rows
-- (jobs_due leads with priority, so it cannot answer MIN(run_at) without a full visit).
CREATE INDEX jobs_queued_run_at ON jobs (run_at) WHERE status = 'queued';
-- "When did this type last succeed?" (periodic overdue) in O(log n).
CREATE INDEX jobs_succeeded_type ON jobs (type, finished_at) WHERE status = 'succeeded';

CREATE TABLE job_attempts (
    id            INTEGER PRIMARY KEY,
    job_id        INTEGER NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    attempt       INTEGER NOT NULL CHECK (attempt >= 1),
    worker_id     TEXT,
    started_at    REAL    NOT NULL,
    finished_at   REAL,
    status        TEXT    NOT NULL
                  CHECK (status IN ('running', 'succeeded', 'failed', 'lost', 'cancelled')),
    error_code    TEXT,
    error_detail  TEXT,
    traceback_ref TEXT,
    UNIQUE (job_id, attempt)
);

CREATE TABLE job_events (
    id     INTEGER PRIMARY KEY,
    job_id INTEGER NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    ts     REAL    NOT NULL,
    event  TEXT    NOT NULL,
    actor  TEXT,
    detail TEXT
);
CREATE INDEX job_events_job ON job_events (job_id, id);

-- Full tracebacks (and later large payloads/results) live outside the jobs row;
-- job_attempts.traceback_ref holds 'blob:<id>'.
CREATE TABLE job_blobs (
    id         INTEGER PRIMARY KEY,
    job_id     INTEGER NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    kind       TEXT    NOT NULL,
    body       TEXT    NOT NULL,
    created_at REAL    NOT NULL
);
CREATE INDEX job_blobs_job ON job_blobs (job_id);

CREATE TABLE workers (
    id           TEXT    PRIMARY KEY,
    hostname     TEXT    NOT NULL,
    pid          INTEGER NOT NULL,
    queues       TEXT,
    -- the job types it handles (comma-separated), so stats can name queued types that no
    -- live worker will ever claim
    types        TEXT,
    -- the worker's running totals as JSON ({"refused": …, "rescued": …, "db_errors": …}),
    -- written with each heartbeat so /metrics can count what only workers see
    counters     TEXT,
    concurrency  INTEGER NOT NULL,
    started_at   REAL    NOT NULL,
    last_seen_at REAL    NOT NULL,
    stopped_at   REAL
);

CREATE TABLE periodic (
    name              TEXT PRIMARY KEY,
    cron              TEXT,
    interval_seconds  REAL,
    timezone          TEXT,
    type              TEXT NOT NULL,
    payload           TEXT NOT NULL DEFAULT '{}',
    queue             TEXT NOT NULL DEFAULT 'default',
    last_enqueued_at  REAL,
    next_run_at       REAL,
    last_succeeded_at REAL,
    -- kept in the table so `errands periodic` / `check` judge schedules without the app
    catch_up          TEXT NOT NULL DEFAULT 'skip',
    grace_seconds     REAL,
    CHECK ((cron IS NULL) <> (interval_seconds IS NULL))
);

-- Hourly rollup that outlives pruning. Histograms are JSON arrays of bucket counts over
-- fixed bounds (see errands.core.rollup), so percentiles can be merged across batches.
CREATE TABLE job_stats_hourly (
    hour     REAL    NOT NULL,
    queue    TEXT    NOT NULL,
    type     TEXT    NOT NULL,
    outcome  TEXT    NOT NULL,
    count    INTEGER NOT NULL DEFAULT 0,
    wait_sum REAL    NOT NULL DEFAULT 0,
    wait_max REAL    NOT NULL DEFAULT 0,
    run_sum  REAL    NOT NULL DEFAULT 0,
    run_max  REAL    NOT NULL DEFAULT 0,
    wait_hist TEXT,
    run_hist  TEXT,
    PRIMARY KEY (hour, queue, type, outcome)
);

-- One row per maintenance role (rescue, prune, periodic): whoever holds an unexpired lease
-- is the leader for it.
CREATE TABLE maintenance_leases (
    name       TEXT PRIMARY KEY,
    holder     TEXT NOT NULL,
    expires_at REAL NOT NULL
);
