-- Named queries of the expiry service (expires_in, docs/flow-control.md "Time rules"). The
-- PostgreSQL file uses the same names.

-- name: expired_jobs
-- Up to :limit queued jobs past their start-by time that never started (jobs_expiring).
SELECT id FROM jobs
WHERE status = 'queued' AND expires_at IS NOT NULL AND expires_at <= :now
  AND started_at IS NULL
ORDER BY expires_at LIMIT :limit;

-- name: deadline_jobs
-- Up to :limit queued jobs past their deadline (jobs_deadline): the claim never starts them.
SELECT id FROM jobs
WHERE status = 'queued' AND deadline_at IS NOT NULL AND deadline_at <= :now
ORDER BY deadline_at LIMIT :limit;

-- name: past_deadline
-- The job if an attempt starting at :at would start at or after its deadline (a retry's
-- run_at, a sleep's wake): compared here, so both sides have the stored precision.
SELECT id FROM jobs WHERE id = :job_id AND deadline_at IS NOT NULL AND deadline_at <= :at;
