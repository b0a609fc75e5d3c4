-- errands schema version 9 (SQLite): dependencies (issue #24, docs/pipelines.md). A job enqueued
-- after=[…] is 'waiting' until every job it depends on is final; job_deps holds the edges.
--
-- The new state needs the jobs CHECK list widened, and SQLite can change a CHECK only by
-- rebuilding the table (the documented 12 steps: new table, copy, drop, rename). It runs with
-- foreign keys off (SQLiteBackend.migrate), so dropping the old table cascades nothing:
-- job_attempts, job_events and job_blobs keep their rows and their REFERENCES jobs (id),
-- which names the rebuilt table once it is renamed. Ids are copied as they are, and
-- AUTOINCREMENT's high-water mark is carried over, so no id is ever reused.
-- Re-run over a newer schema (tests re-apply it), the rebuild meets the view migration 0013
-- puts over jobs, whose trigger SQLite re-reads at the rename: drop it first (0013 makes it
-- again; on the first run it does not exist yet).
DROP VIEW IF EXISTS errands_enqueue;
CREATE TABLE jobs_new (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    queue            TEXT    NOT NULL DEFAULT 'default',
    type             TEXT    NOT NULL,
    payload          TEXT    NOT NULL DEFAULT '{}',
    status           TEXT    NOT NULL DEFAULT 'queued'
                     CHECK (status IN ('waiting', 'queued', 'running', 'succeeded', 'failed',
                                       'cancelled')),
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
    cancel_requested INTEGER NOT NULL DEFAULT 0 CHECK (cancel_requested IN (0, 1)),
    headers          TEXT,
    limit_key        TEXT,
    limit_group      TEXT,
    progress         REAL,
    progress_message TEXT,
    progress_at      REAL
);
INSERT INTO jobs_new
    (id, queue, type, payload, status, priority, attempts, max_attempts, run_at, created_at,
     started_at, finished_at, worker_id, heartbeat_at, lease_expires_at, unique_key, error_code,
     error_detail, result, payload_ref, result_ref, cancel_requested, headers, limit_key,
     limit_group, progress, progress_message, progress_at)
SELECT id, queue, type, payload, status, priority, attempts, max_attempts, run_at, created_at,
       started_at, finished_at, worker_id, heartbeat_at, lease_expires_at, unique_key, error_code,
       error_detail, result, payload_ref, result_ref, cancel_requested, headers, limit_key,
       limit_group, progress, progress_message, progress_at
FROM jobs;
DELETE FROM sqlite_sequence WHERE name = 'jobs_new';
UPDATE sqlite_sequence SET name = 'jobs_new' WHERE name = 'jobs';
DROP TABLE jobs;
ALTER TABLE jobs_new RENAME TO jobs;

-- The indexes the old table had (dropped with it), as migrations 0001-0008 left them.
CREATE INDEX jobs_due ON jobs (priority DESC, run_at, id)
WHERE status = 'queued' AND limit_key IS NULL;
CREATE INDEX jobs_limited_due ON jobs (limit_key, limit_group, priority DESC, run_at, id)
WHERE status = 'queued' AND limit_key IS NOT NULL;
CREATE INDEX jobs_limited_running ON jobs (limit_key, limit_group)
WHERE status = 'running' AND limit_key IS NOT NULL;
CREATE UNIQUE INDEX jobs_unique_active ON jobs (unique_key)
    WHERE unique_key IS NOT NULL AND status IN ('queued', 'running');
CREATE INDEX jobs_finished ON jobs (status, finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX jobs_error_code ON jobs (error_code, type, finished_at) WHERE error_code IS NOT NULL;
CREATE INDEX jobs_succeeded_type ON jobs (type, finished_at) WHERE status = 'succeeded';
CREATE INDEX jobs_errors_unfinished ON jobs (error_code, type)
WHERE error_code IS NOT NULL AND finished_at IS NULL;
CREATE INDEX jobs_queued_run_at ON jobs (run_at, id, queue, type) WHERE status = 'queued';
CREATE INDEX jobs_running ON jobs (lease_expires_at, queue, type) WHERE status = 'running';
-- Waiting jobs per queue and type (counts), and the sweeper's and check's walk over them.
CREATE INDEX IF NOT EXISTS jobs_waiting ON jobs (queue, type) WHERE status = 'waiting';

-- One row per edge: job_id runs after upstream_id. upstream_status is NULL while the
-- upstream is not final and the final state it reached once it is, written in the
-- transaction that made it final: a dependent is ready when none of its edges is open.
-- on_failure is the dependent's on_upstream_failure ('cancel': an upstream that did not
-- succeed cancels it; 'run': it runs whatever the outcome).
CREATE TABLE IF NOT EXISTS job_deps (
    job_id          INTEGER NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    upstream_id     INTEGER NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    on_failure      TEXT    NOT NULL DEFAULT 'cancel' CHECK (on_failure IN ('cancel', 'run')),
    upstream_status TEXT,
    PRIMARY KEY (job_id, upstream_id)
);
-- The release probe (an upstream became final: which edges does it close?), a job's
-- downstream, and prune's "does a waiting job still depend on it?".
CREATE INDEX IF NOT EXISTS job_deps_upstream ON job_deps (upstream_id);
-- "Has this dependent an open edge left?": one index probe, however many upstreams it has
-- (a callback after 10,000 members), so a release never scans the finished ones.
CREATE INDEX IF NOT EXISTS job_deps_open ON job_deps (job_id) WHERE upstream_status IS NULL;
