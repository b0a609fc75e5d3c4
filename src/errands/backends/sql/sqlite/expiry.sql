-- Named queries of the expiry service (expires_in, docs/flow-control.md "Time rules"). The
-- PostgreSQL file uses the same names.

-- name: expired_jobs
-- Up to :limit queued jobs past their start-by time that never started (jobs_expiring).
SELECT id FROM jobs
WHERE status = 'queued' AND expires_at IS NOT NULL AND expires_at <= :now
  AND started_at IS NULL
ORDER BY expires_at LIMIT :limit;
