-- Time series for the dashboard's charts (web/charts.py).

-- name: hourly_outcomes
-- Finished jobs per hour and outcome since :since. Hours the trigger-kept minutes cover whole
-- (from the hour after the oldest minute left: prune drops minutes oldest first) are summed
-- from job_stats_minutely, pruned jobs included, without visiting a job row; older hours come
-- from the rows still in the table plus the rolled-up hours of pruned rows.
WITH kept AS (
    SELECT COALESCE(CAST(MIN(m) / 3600 AS INTEGER) * 3600.0 + 3600, 9e18) AS at FROM (
        SELECT MIN(minute) AS m FROM job_stats_minutely WHERE measure = 'succeeded'
        UNION ALL SELECT MIN(minute) FROM job_stats_minutely WHERE measure = 'failed'
        UNION ALL SELECT MIN(minute) FROM job_stats_minutely WHERE measure = 'cancelled'
    ) AS oldest
)
SELECT hour, outcome, SUM(n) AS n FROM (
    SELECT CAST(minute / 3600 AS INTEGER) * 3600.0 AS hour, measure AS outcome,
           SUM(count) AS n
    FROM job_stats_minutely, kept
    WHERE measure IN ('succeeded', 'failed', 'cancelled') AND minute >= MAX(:since, kept.at)
    GROUP BY 1, 2
    UNION ALL
    SELECT CAST(finished_at / 3600 AS INTEGER) * 3600.0 AS hour, status AS outcome, COUNT(*) AS n
    FROM jobs, kept
    WHERE status IN ('succeeded', 'failed', 'cancelled') AND finished_at >= :since
      AND finished_at < kept.at
    GROUP BY 1, 2
    UNION ALL
    SELECT hour, outcome, SUM(count) AS n FROM job_stats_hourly, kept
    WHERE hour >= :since AND hour < kept.at
    GROUP BY hour, outcome
) AS merged
GROUP BY hour, outcome
ORDER BY hour, outcome;

-- name: hourly_latency
-- Wait and run time histograms per hour since :since (job_stats_minutely: kept 8 days, pruned
-- jobs included), for the percentile charts: per hour, measure and bucket, count and maximum.
SELECT CAST(minute / 3600 AS INTEGER) * 3600.0 AS hour, measure, bucket,
       SUM(count) AS count, MAX(maximum) AS maximum
FROM job_stats_minutely
WHERE measure IN ('wait', 'run') AND minute >= :since
GROUP BY 1, 2, 3
ORDER BY 1, 2, 3;

-- name: hourly_of_type
-- The charts of one :type (and :queue when given), from the rows still in the table: per hour
-- of finish and outcome, the jobs with the histogram buckets of their wait (due → start of
-- the last attempt) and run (that start → outcome), as the Pruner's rollup counts them
-- (rollup.durations), so an hour reads the same before and after it is pruned. NULL buckets:
-- a job cancelled before it started has neither. Two arms, so the successes (most rows) take
-- jobs_succeeded_type's range of the type and the rest jobs_finished's range of the window.
SELECT hour, outcome, wait_bucket, run_bucket, COUNT(*) AS n,
       MAX(w) AS wait_max, MAX(r) AS run_max
FROM (
    SELECT CAST(finished_at / 3600 AS INTEGER) * 3600.0 AS hour, status AS outcome, w, r,
           CASE WHEN w IS NOT NULL THEN
               (SELECT COUNT(*) FROM job_stats_bounds WHERE upper < w) END AS wait_bucket,
           CASE WHEN r IS NOT NULL THEN
               (SELECT COUNT(*) FROM job_stats_bounds WHERE upper < r) END AS run_bucket
    FROM (
        SELECT finished_at, status,
               CASE WHEN started_at IS NOT NULL AND run_at IS NOT NULL
                    THEN MAX(started_at - run_at, 0.0) END AS w,
               CASE WHEN started_at IS NOT NULL
                    THEN MAX(finished_at - started_at, 0.0) END AS r
        FROM jobs
        WHERE status = 'succeeded' AND type = :type AND finished_at >= :since
          AND (:queue IS NULL OR queue = :queue)
        UNION ALL
        SELECT finished_at, status,
               CASE WHEN started_at IS NOT NULL AND run_at IS NOT NULL
                    THEN MAX(started_at - run_at, 0.0) END,
               CASE WHEN started_at IS NOT NULL THEN MAX(finished_at - started_at, 0.0) END
        FROM jobs
        WHERE status IN ('failed', 'cancelled') AND finished_at >= :since AND +type = :type
          AND (:queue IS NULL OR queue = :queue)
    ) AS f
) AS b
GROUP BY hour, outcome, wait_bucket, run_bucket;

-- name: hourly_rollup_of_type
-- The same charts' pruned part: the rolled-up hours of one :type (and :queue when given).
SELECT hour, outcome, count AS n, wait_max, run_max, wait_hist, run_hist
FROM job_stats_hourly
WHERE hour >= :since AND type = :type AND (:queue IS NULL OR queue = :queue)
ORDER BY hour;

-- name: hourly_outcomes_of_queue
-- hourly_outcomes for one :queue: finished jobs per hour and outcome since :since (+queue:
-- the window's ranges of jobs_finished and the rollup's key, not every row of the queue).
WITH kept AS (
    SELECT COALESCE(CAST(MIN(m) / 3600 AS INTEGER) * 3600.0 + 3600, 9e18) AS at FROM (
        SELECT MIN(minute) AS m FROM job_stats_minutely WHERE measure = 'succeeded'
        UNION ALL SELECT MIN(minute) FROM job_stats_minutely WHERE measure = 'failed'
        UNION ALL SELECT MIN(minute) FROM job_stats_minutely WHERE measure = 'cancelled'
    ) AS oldest
)
SELECT hour, outcome, SUM(n) AS n FROM (
    SELECT CAST(minute / 3600 AS INTEGER) * 3600.0 AS hour, measure AS outcome,
           SUM(count) AS n
    FROM job_stats_minutely, kept
    WHERE measure IN ('succeeded', 'failed', 'cancelled') AND minute >= MAX(:since, kept.at)
      AND queue = :queue
    GROUP BY 1, 2
    UNION ALL
    SELECT CAST(finished_at / 3600 AS INTEGER) * 3600.0 AS hour, status AS outcome, COUNT(*) AS n
    FROM jobs, kept
    WHERE status IN ('succeeded', 'failed', 'cancelled') AND finished_at >= :since
      AND finished_at < kept.at AND +queue = :queue
    GROUP BY 1, 2
    UNION ALL
    SELECT hour, outcome, SUM(count) AS n FROM job_stats_hourly, kept
    WHERE hour >= :since AND hour < kept.at AND +queue = :queue
    GROUP BY hour, outcome
) AS merged
GROUP BY hour, outcome
ORDER BY hour, outcome;

-- name: hourly_latency_of_queue
-- hourly_latency for one :queue.
SELECT CAST(minute / 3600 AS INTEGER) * 3600.0 AS hour, measure, bucket,
       SUM(count) AS count, MAX(maximum) AS maximum
FROM job_stats_minutely
WHERE measure IN ('wait', 'run') AND minute >= :since AND queue = :queue
GROUP BY 1, 2, 3
ORDER BY 1, 2, 3;
