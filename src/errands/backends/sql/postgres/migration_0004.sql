-- errands schema version 4 (PostgreSQL): the figures are kept by errands' own writes, no
-- triggers, as sql/sqlite/migration_0004.sql. The statement-level trigger functions of
-- migration 0002 ran on every claim and outcome statement (to find nothing for a claim) and
-- cost the worker a third of its throughput; every errands write that moves a job into or out
-- of a final state, or closes an attempt with an outcome, now counts in its own transaction
-- with grouped named queries (jobs.sql: count_batch_jobs, count_batch_minutes,
-- count_batch_errors, uncount_jobs), into its backend's shard as before. A hand-written
-- change of the jobs rows is not seen: recount (docs/operations.md, Queue.recount_figures).
-- Also: the error figures `top_errors` reads.

-- Per minute, error code and type: jobs that reached a final state carrying an error code, as
-- sql/sqlite/migration_0004.sql (what `top_errors` reads for the finished part of its window),
-- taken off again when a job leaves its final state or is deleted; one shard per backend.
CREATE TABLE job_errors_minutely (
    minute           timestamptz NOT NULL,
    error_code       text        NOT NULL,
    type             text        NOT NULL,
    shard            integer     NOT NULL DEFAULT 0,
    count            bigint      NOT NULL DEFAULT 0,
    last_finished_at timestamptz,
    PRIMARY KEY (minute, error_code, type, shard)
);

CREATE INDEX jobs_errors_unfinished ON jobs (error_code, type)
WHERE error_code IS NOT NULL AND finished_at IS NULL;

-- The histogram bucket of a value (COUNT of bounds below it, in the figure
-- queries) as a range of an index instead of a scan of the bounds for every value counted:
-- measured 2 us less per finished job on SQLite.
CREATE INDEX job_stats_bounds_upper ON job_stats_bounds (upper);

-- The triggers and functions of migration 0002. IF EXISTS: a migration may be applied again
-- over a target an older graduate prepared (tests/cli/test_graduate.py).
DROP TRIGGER IF EXISTS jobs_finished_insert ON jobs;
DROP TRIGGER IF EXISTS jobs_finished_update ON jobs;
DROP TRIGGER IF EXISTS jobs_finished_delete ON jobs;
DROP TRIGGER IF EXISTS job_attempts_finished_update ON job_attempts;
DROP TRIGGER IF EXISTS job_attempts_finished_insert ON job_attempts;
DROP FUNCTION IF EXISTS errands_jobs_changed();
DROP FUNCTION IF EXISTS errands_attempts_changed();

-- What is already in the tables: the last 8 days' errored jobs.
INSERT INTO job_errors_minutely (minute, error_code, type, shard, count, last_finished_at)
SELECT errands_minute(finished_at), error_code, type, 0, COUNT(*), MAX(finished_at)
FROM jobs
WHERE status IN ('succeeded', 'failed', 'cancelled') AND error_code IS NOT NULL
  AND finished_at >= now() - interval '8 days'
GROUP BY 1, 2, 3;
