-- Time series for the dashboard's charts (web/charts.py).

-- name: hourly_outcomes
-- Finished jobs per hour and outcome since :since: rows still in the table, bucketed by the
-- hour they finished in (from the epoch, not date_trunc, which follows the session's time
-- zone), plus the rolled-up hours of pruned rows (job_stats_hourly).
SELECT hour, outcome, SUM(n) FROM (
    SELECT to_timestamp(floor(extract(epoch FROM finished_at) / 3600) * 3600) AS hour,
           status AS outcome, COUNT(*) AS n
    FROM jobs
    WHERE status IN ('succeeded', 'failed', 'cancelled') AND finished_at >= to_timestamp(:since)
    GROUP BY 1, 2
    UNION ALL
    SELECT hour, outcome, SUM(count) AS n FROM job_stats_hourly WHERE hour >= to_timestamp(:since)
    GROUP BY hour, outcome
) AS merged
GROUP BY hour, outcome
ORDER BY hour, outcome;
