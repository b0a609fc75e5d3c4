-- A recount of the figures from the rows (figures.py: recount): what graduate runs on the
-- target it filled, and what an operator runs after changing jobs rows by hand
-- (docs/operations.md, Queue.recount_figures). The same statements as migration_0002.sql's
-- and migration_0004.sql's initial fill. job_counts and job_errors_minutely are functions of
-- the rows and are rebuilt whole (error minutes before :since are dropped, as prune would);
-- job_stats_minutely is history and is rebuilt from :since only: the outcomes of jobs
-- retried or pruned since are no longer in the rows, so they leave those minutes.

-- name: forget_job_counts
DELETE FROM job_counts;

-- name: recount_job_counts
INSERT INTO job_counts (status, queue, type, shard, n)
SELECT status, queue, type, 0, COUNT(*) FROM jobs
WHERE status IN ('succeeded', 'failed', 'cancelled') AND finished_at IS NOT NULL
GROUP BY status, queue, type;

-- name: forget_minutes_since
DELETE FROM job_stats_minutely
WHERE measure IN ('succeeded', 'failed', 'cancelled', 'wait', 'run') AND minute >= :since;

-- name: recount_minutes_since
-- Outcomes by attempts used and wait of each finished job, run time of each attempt that
-- ended with an outcome, per minute from :since (a minute's start).
INSERT INTO job_stats_minutely (measure, minute, queue, bucket, shard, count, total, maximum)
SELECT measure, minute, queue, bucket, 0, COUNT(*), SUM(v), MAX(v) FROM (
    SELECT status AS measure, CAST(finished_at / 60 AS INTEGER) * 60.0 AS minute, queue,
           attempts AS bucket, 0.0 AS v
    FROM jobs
    WHERE status IN ('succeeded', 'failed', 'cancelled') AND finished_at >= :since
    UNION ALL
    SELECT 'wait', CAST(finished_at / 60 AS INTEGER) * 60.0, queue,
           (SELECT COUNT(*) FROM job_stats_bounds WHERE upper < MAX(started_at - run_at, 0.0)),
           MAX(started_at - run_at, 0.0)
    FROM jobs
    WHERE status IN ('succeeded', 'failed', 'cancelled') AND finished_at >= :since
      AND started_at IS NOT NULL
    UNION ALL
    SELECT 'run', CAST(a.finished_at / 60 AS INTEGER) * 60.0, j.queue,
           (SELECT COUNT(*) FROM job_stats_bounds
            WHERE upper < MAX(a.finished_at - a.started_at, 0.0)),
           MAX(a.finished_at - a.started_at, 0.0)
    FROM job_attempts AS a JOIN jobs AS j ON j.id = a.job_id
    WHERE a.status IN ('succeeded', 'failed', 'cancelled') AND a.finished_at >= :since
)
GROUP BY measure, minute, queue, bucket;

-- name: forget_error_minutes_all
DELETE FROM job_errors_minutely;

-- name: recount_error_minutes_since
INSERT INTO job_errors_minutely (minute, error_code, type, shard, count, last_finished_at)
SELECT CAST(finished_at / 60 AS INTEGER) * 60.0 AS m, error_code, type, 0, COUNT(*),
       MAX(finished_at)
FROM jobs
WHERE status IN ('succeeded', 'failed', 'cancelled') AND error_code IS NOT NULL
  AND finished_at >= :since
GROUP BY m, error_code, type;
