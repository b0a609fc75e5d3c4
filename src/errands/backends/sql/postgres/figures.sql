-- A recount of the figures from the rows (figures.py: recount), as sql/sqlite/figures.sql:
-- what graduate runs on the target it filled, and what an operator runs after changing jobs
-- rows by hand (docs/operations.md, Queue.recount_figures). The same statements as
-- migration_0002.sql's and migration_0004.sql's initial fill, into shard 0 (every shard of
-- the recounted tables is replaced).

-- name: forget_job_counts
DELETE FROM job_counts;

-- name: recount_job_counts
INSERT INTO job_counts (status, queue, type, shard, n)
SELECT status, queue, type, 0, COUNT(*) FROM jobs
WHERE status IN ('succeeded', 'failed', 'cancelled') AND finished_at IS NOT NULL
GROUP BY status, queue, type;

-- name: forget_minutes_since
DELETE FROM job_stats_minutely
WHERE measure IN ('succeeded', 'failed', 'cancelled', 'wait', 'run')
  AND minute >= to_timestamp(:since);

-- name: recount_minutes_since
-- Outcomes by attempts used and wait of each finished job, run time of each attempt that
-- ended with an outcome, per minute from :since (a minute's start).
INSERT INTO job_stats_minutely (measure, minute, queue, bucket, shard, count, total, maximum)
SELECT measure, minute, queue, bucket, 0, COUNT(*), SUM(v), MAX(v) FROM (
    SELECT status AS measure, errands_minute(finished_at) AS minute, queue,
           attempts AS bucket, 0::float8 AS v
    FROM jobs
    WHERE status IN ('succeeded', 'failed', 'cancelled')
      AND finished_at >= to_timestamp(:since)
    UNION ALL
    SELECT 'wait', errands_minute(finished_at), queue, errands_bucket(w), w
    FROM (SELECT finished_at, queue,
                 GREATEST(EXTRACT(EPOCH FROM started_at) - EXTRACT(EPOCH FROM run_at),
                          0)::float8 AS w
          FROM jobs
          WHERE status IN ('succeeded', 'failed', 'cancelled')
            AND finished_at >= to_timestamp(:since) AND started_at IS NOT NULL) AS waits
    UNION ALL
    SELECT 'run', errands_minute(finished_at), queue, errands_bucket(r), r
    FROM (SELECT a.finished_at, j.queue,
                 GREATEST(EXTRACT(EPOCH FROM a.finished_at)
                          - EXTRACT(EPOCH FROM a.started_at), 0)::float8 AS r
          FROM job_attempts AS a JOIN jobs AS j ON j.id = a.job_id
          WHERE a.status IN ('succeeded', 'failed', 'cancelled')
            AND a.finished_at >= to_timestamp(:since)) AS runs
) AS f
GROUP BY measure, minute, queue, bucket;

-- name: forget_error_minutes_all
DELETE FROM job_errors_minutely;

-- name: recount_error_minutes_since
INSERT INTO job_errors_minutely (minute, error_code, type, shard, count, last_finished_at)
SELECT errands_minute(finished_at), error_code, type, 0, COUNT(*), MAX(finished_at)
FROM jobs
WHERE status IN ('succeeded', 'failed', 'cancelled') AND error_code IS NOT NULL
  AND finished_at >= to_timestamp(:since)
GROUP BY 1, 2, 3;
