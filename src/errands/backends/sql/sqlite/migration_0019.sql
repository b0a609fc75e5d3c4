-- errands schema version 19 (SQLite): the snoozed attempts, newest job first, for the job
-- list's snoozed view (docs/dashboard.md, "/jobs"). A job is snoozed while it is queued and
-- its latest attempt ended snoozed; this index lists those attempts only (a handler that
-- never raises errands.Snooze adds nothing to it), so the view looks at them rather than at
-- every queued job. It holds the status too, so that reading it needs no look at the table.
CREATE INDEX IF NOT EXISTS job_attempts_snoozed ON job_attempts (job_id, attempt, status)
WHERE status = 'snoozed';
