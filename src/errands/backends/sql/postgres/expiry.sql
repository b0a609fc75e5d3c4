-- Named queries of the expiry service (expires_in, docs/flow-control.md "Time rules"): the
-- same names and columns as sql/sqlite/expiry.sql.

-- name: expired_jobs
-- Up to :limit queued jobs past their start-by time that never started (jobs_expiring),
-- locked; SKIP LOCKED: a job a worker is claiming right now is left to the claim's own check.
SELECT id FROM jobs
WHERE status = 'queued' AND expires_at IS NOT NULL AND expires_at <= to_timestamp(:now)
  AND started_at IS NULL
ORDER BY expires_at LIMIT :limit
FOR UPDATE SKIP LOCKED;

-- name: deadline_jobs
-- Up to :limit queued jobs past their deadline (jobs_deadline), locked; SKIP LOCKED as above.
SELECT id FROM jobs
WHERE status = 'queued' AND deadline_at IS NOT NULL AND deadline_at <= to_timestamp(:now)
ORDER BY deadline_at LIMIT :limit
FOR UPDATE SKIP LOCKED;

-- name: past_deadline
-- The job if an attempt starting at :at would start at or after its deadline (a retry's
-- run_at, a sleep's wake): compared here as to_timestamp rounds both to microseconds.
SELECT id FROM jobs
WHERE id = :job_id AND deadline_at IS NOT NULL AND deadline_at <= to_timestamp(:at);
