-- errands schema version 8 (PostgreSQL): flow control (issue #23, docs/flow-control.md), as
-- sql/sqlite/migration_0008.sql.

CREATE TABLE IF NOT EXISTS queue_pauses (
    queue     text PRIMARY KEY,
    paused_at timestamptz NOT NULL,
    paused_by text,
    reason    text
);

CREATE TABLE IF NOT EXISTS flow_limits (
    key                text PRIMARY KEY,
    code_running       integer CHECK (code_running >= 0),
    code_rate_count    integer CHECK (code_rate_count >= 1),
    code_rate_seconds  double precision CHECK (code_rate_seconds > 0),
    code_seen_at       timestamptz,
    running            integer CHECK (running >= 0),
    rate_count         integer CHECK (rate_count >= 1),
    rate_seconds       double precision CHECK (rate_seconds > 0),
    set_at             timestamptz,
    set_by             text
);

CREATE TABLE IF NOT EXISTS limit_starts (
    key        text        NOT NULL,
    grp        text        NOT NULL,
    started_at timestamptz NOT NULL,
    job_id     bigint      NOT NULL
);
CREATE INDEX IF NOT EXISTS limit_starts_window ON limit_starts (key, grp, started_at);

ALTER TABLE jobs ADD COLUMN IF NOT EXISTS limit_key text;
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS limit_group text;
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS progress double precision;
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS progress_message text;
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS progress_at timestamptz;

-- Re-applied over an already migrated target (graduate: tests), every statement is idempotent.
DROP INDEX IF EXISTS jobs_due;
CREATE INDEX IF NOT EXISTS jobs_due ON jobs (priority DESC, run_at, id)
WHERE status = 'queued' AND limit_key IS NULL;
CREATE INDEX IF NOT EXISTS jobs_limited_due ON jobs (limit_key, limit_group, priority DESC, run_at, id)
WHERE status = 'queued' AND limit_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS jobs_limited_running ON jobs (limit_key, limit_group)
WHERE status = 'running' AND limit_key IS NOT NULL;

ALTER TABLE job_attempts DROP CONSTRAINT IF EXISTS job_attempts_status_check;
ALTER TABLE job_attempts ADD CONSTRAINT job_attempts_status_check
    CHECK (status IN ('running', 'succeeded', 'failed', 'lost', 'cancelled', 'snoozed'));
