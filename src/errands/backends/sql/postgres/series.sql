-- Time series for the dashboard's charts (web/charts.py).

-- name: hourly_outcomes
-- Finished jobs per hour and outcome since :since. Hours the trigger-kept minutes cover whole
-- (from the hour after the oldest minute left: prune drops minutes oldest first) are summed
-- from job_stats_minutely, pruned jobs included, without visiting a job row; older hours come
-- from the rows still in the table plus the rolled-up hours of pruned rows. Hours are cut
-- from the epoch, not with date_trunc, which follows the session's time zone.
WITH kept AS (
    SELECT COALESCE(to_timestamp(floor(extract(epoch FROM MIN(m)) / 3600) * 3600 + 3600),
                    'infinity'::timestamptz) AS at
    FROM (
        SELECT MIN(minute) AS m FROM job_stats_minutely WHERE measure = 'succeeded'
        UNION ALL SELECT MIN(minute) FROM job_stats_minutely WHERE measure = 'failed'
        UNION ALL SELECT MIN(minute) FROM job_stats_minutely WHERE measure = 'cancelled'
    ) AS oldest
)
SELECT hour, outcome, SUM(n) AS n FROM (
    SELECT to_timestamp(floor(extract(epoch FROM minute) / 3600) * 3600) AS hour,
           measure AS outcome, SUM(count) AS n
    FROM job_stats_minutely, kept
    WHERE measure IN ('succeeded', 'failed', 'cancelled')
      AND minute >= GREATEST(to_timestamp(:since), kept.at)
    GROUP BY 1, 2
    UNION ALL
    SELECT to_timestamp(floor(extract(epoch FROM finished_at) / 3600) * 3600) AS hour,
           status AS outcome, COUNT(*) AS n
    FROM jobs, kept
    WHERE status IN ('succeeded', 'failed', 'cancelled') AND finished_at >= to_timestamp(:since)
      AND finished_at < kept.at
    GROUP BY 1, 2
    UNION ALL
    SELECT hour, outcome, SUM(count) AS n FROM job_stats_hourly, kept
    WHERE hour >= to_timestamp(:since) AND hour < kept.at
    GROUP BY hour, outcome
) AS merged
GROUP BY hour, outcome
ORDER BY hour, outcome;

-- name: hourly_latency
-- Wait and run time histograms per hour since :since (job_stats_minutely: kept 8 days, pruned
-- jobs included), for the percentile charts: per hour, measure and bucket, count and maximum.
-- Hours cut from the epoch, as in hourly_outcomes.
SELECT to_timestamp(floor(extract(epoch FROM minute) / 3600) * 3600) AS hour, measure, bucket,
       SUM(count) AS count, MAX(maximum) AS maximum
FROM job_stats_minutely
WHERE measure IN ('wait', 'run') AND minute >= to_timestamp(:since)
GROUP BY 1, 2, 3
ORDER BY 1, 2, 3;
