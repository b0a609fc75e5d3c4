-- The charts of one job type (web/boards.py, series.sql: hourly_of_type): a week of that
-- type's finished rows read from the index alone (status, queue and the three times
-- included), not ~70,000 heap visits scattered over the table.
-- jobs_succeeded_type stays: the schedules' last success (periodic.sql) is one lookup there.
CREATE INDEX IF NOT EXISTS jobs_finished_type ON jobs (type, finished_at)
    INCLUDE (status, queue, run_at, started_at) WHERE finished_at IS NOT NULL;
