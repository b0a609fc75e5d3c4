-- errands schema version 2 (SQLite): what the operations views need.

-- The job types a worker handles (comma-separated, like queues), so stats can name queued
-- types that no live worker will ever claim.
ALTER TABLE workers ADD COLUMN types TEXT;

-- Periodic schedules keep their catch-up policy and overdue grace in the table, so
-- `errands periodic` and `errands check` can judge them without importing the application.
ALTER TABLE periodic ADD COLUMN catch_up TEXT NOT NULL DEFAULT 'skip';
ALTER TABLE periodic ADD COLUMN grace_seconds REAL;

-- "Oldest due queued job": a range on run_at over queued rows only (jobs_due leads with
-- priority, so it cannot answer MIN(run_at) without visiting every queued row).
CREATE INDEX jobs_queued_run_at ON jobs (run_at) WHERE status = 'queued';

-- "When did this type last succeed?" (periodic overdue) in O(log n).
CREATE INDEX jobs_succeeded_type ON jobs (type, finished_at) WHERE status = 'succeeded';

-- Top error codes by type over a window, answered from the index alone.
DROP INDEX jobs_error_code;
CREATE INDEX jobs_error_code ON jobs (error_code, type, finished_at) WHERE error_code IS NOT NULL;
