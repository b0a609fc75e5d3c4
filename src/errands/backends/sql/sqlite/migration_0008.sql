-- errands schema version 8 (SQLite): flow control (issue #23, docs/flow-control.md) — paused queues,
-- concurrency and rate limits, snooze, progress.

-- A row per paused queue ('*': every queue). The claim reads it in its own transaction, so a
-- committed pause binds every worker from its next claim on; resume deletes the row.
CREATE TABLE queue_pauses (
    queue     TEXT PRIMARY KEY,
    paused_at REAL NOT NULL,
    paused_by TEXT,
    reason    TEXT
);

-- Limits by key: what the code declares (written by each worker at start, code_*) and what
-- an operator set (q.set_limit: running/rate_*, set_at not NULL), which wins until cleared.
-- A NULL cap is no cap of that kind.
CREATE TABLE flow_limits (
    key                TEXT PRIMARY KEY,
    code_running       INTEGER CHECK (code_running >= 0),
    code_rate_count    INTEGER CHECK (code_rate_count >= 1),
    code_rate_seconds  REAL    CHECK (code_rate_seconds > 0),
    code_seen_at       REAL,
    running            INTEGER CHECK (running >= 0),
    rate_count         INTEGER CHECK (rate_count >= 1),
    rate_seconds       REAL    CHECK (rate_seconds > 0),
    set_at             REAL,
    set_by             TEXT
);

-- The attempt starts of rate-limited keys (the claim's time, which is also the attempt's
-- started_at), read by the claim's window check and trimmed by it to the window.
CREATE TABLE limit_starts (
    key        TEXT    NOT NULL,
    grp        TEXT    NOT NULL,
    started_at REAL    NOT NULL,
    job_id     INTEGER NOT NULL
);
CREATE INDEX limit_starts_window ON limit_starts (key, grp, started_at);

-- A limited job carries its key and group ('' without a group), fixed at enqueue.
ALTER TABLE jobs ADD COLUMN limit_key TEXT;
ALTER TABLE jobs ADD COLUMN limit_group TEXT;
-- The latest ctx.progress() of the running (or last) attempt.
ALTER TABLE jobs ADD COLUMN progress REAL;
ALTER TABLE jobs ADD COLUMN progress_message TEXT;
ALTER TABLE jobs ADD COLUMN progress_at REAL;

-- The claim of unlimited jobs never reads a limited one: 100,000 jobs waiting on a saturated
-- key are outside this index, so they cannot stand in front of anything.
DROP INDEX IF EXISTS jobs_due;
CREATE INDEX jobs_due ON jobs (priority DESC, run_at, id)
WHERE status = 'queued' AND limit_key IS NULL;
-- Limited jobs: the claim finds the keys and groups with queued work (a skip scan over the
-- first two columns) and takes each group's best due jobs up to its headroom.
CREATE INDEX jobs_limited_due ON jobs (limit_key, limit_group, priority DESC, run_at, id)
WHERE status = 'queued' AND limit_key IS NOT NULL;
-- The live holders of each key and group: what the claim counts against `running`.
CREATE INDEX jobs_limited_running ON jobs (limit_key, limit_group)
WHERE status = 'running' AND limit_key IS NOT NULL;

-- job_attempts gains the status 'snoozed' (raise errands.Snooze): SQLite changes a CHECK only
-- by rebuilding the table. Nothing references job_attempts, so the rebuild drops nothing.
CREATE TABLE job_attempts_new (
    id            INTEGER PRIMARY KEY,
    job_id        INTEGER NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    attempt       INTEGER NOT NULL CHECK (attempt >= 1),
    worker_id     TEXT,
    started_at    REAL    NOT NULL,
    finished_at   REAL,
    status        TEXT    NOT NULL
                  CHECK (status IN ('running', 'succeeded', 'failed', 'lost', 'cancelled',
                                    'snoozed')),
    error_code    TEXT,
    error_detail  TEXT,
    traceback_ref TEXT,
    UNIQUE (job_id, attempt)
);
INSERT INTO job_attempts_new (id, job_id, attempt, worker_id, started_at, finished_at, status,
                              error_code, error_detail, traceback_ref)
SELECT id, job_id, attempt, worker_id, started_at, finished_at, status, error_code,
       error_detail, traceback_ref
FROM job_attempts;
DROP TABLE job_attempts;
ALTER TABLE job_attempts_new RENAME TO job_attempts;
