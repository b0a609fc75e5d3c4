-- errands schema version 16 (PostgreSQL): time rules (issue #34, docs/flow-control.md). The
-- same as sql/sqlite/migration_0016.sql.
-- unique_for: the dedup window a job was enqueued with (seconds, NULL: none). Once the job
-- succeeded its unique_key stays taken until finished_at + unique_for, and prune keeps the row
-- until then, so the hold outlives retention.
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS unique_for double precision;
-- The succeeded jobs that may hold a key: an enqueue with unique_for looks its key up here.
CREATE INDEX IF NOT EXISTS jobs_unique_held ON jobs (unique_key, finished_at)
    WHERE status = 'succeeded' AND unique_for IS NOT NULL;
-- debounce_key: the unique_key a debounced job was enqueued with (debounce=, NULL: none). At
-- most one job per key is queued and not yet started: each enqueue of the key updates it, and
-- while one runs the next enqueue makes the one queued job after it — which is why the key is
-- not the unique_key, whose index holds running jobs too.
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS debounce_key text;
CREATE UNIQUE INDEX IF NOT EXISTS jobs_debounce_queued ON jobs (debounce_key)
    WHERE debounce_key IS NOT NULL AND status = 'queued' AND attempts = 0;
-- expires_in: how long after it is due a job may still make its first start (NULL: no
-- limit); expires_at: that start-by time, set from run_at when the job is queued (or released
-- by its dependencies) and moved with a debounced run_at. The claim never starts a job past
-- it that has not started yet, and the expiry service cancels those (EXPIRED:QUEUE).
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS expires_in double precision;
ALTER TABLE jobs ADD COLUMN IF NOT EXISTS expires_at timestamptz;
CREATE INDEX IF NOT EXISTS jobs_expiring ON jobs (expires_at)
    WHERE status = 'queued' AND expires_at IS NOT NULL;
