-- The operator's edits of single jobs (backends/jobs_actions.py): delete, run now, priority.
-- The PostgreSQL file keeps the same names, parameters and result columns. Each edit is fenced
-- on the job's state in its own statement (:from_states, bound from errands.core.states), so
-- a job a worker claimed in between is left alone, never forced.

-- name: action_job
-- One job as an operator's edit reads it first (PostgreSQL: locked), and the lowest id of a
-- waiting job that depends on it (NULL: none; a delete refuses such a job, as prune does).
SELECT id, status, priority, run_at, queue, type, started_at, finished_at,
       (SELECT d.job_id FROM job_deps AS d JOIN jobs AS w ON w.id = d.job_id
        WHERE d.upstream_id = jobs.id AND w.status = 'waiting'
        ORDER BY d.job_id LIMIT 1) AS waiting_dependent
FROM jobs WHERE id = :job_id;

-- name: run_job_now
-- Run now: a queued job whose run_at is still ahead becomes due at :now (a scheduled job, or
-- a retry waiting out its backoff). RETURNING nothing: it was claimed or made due meanwhile.
UPDATE jobs SET run_at = :now
WHERE id = :job_id AND status IN (SELECT value FROM json_each(:from_states)) AND run_at > :now
RETURNING id;

-- name: set_job_priority
-- A new priority for a job not yet claimed (queued or waiting).
UPDATE jobs SET priority = :priority
WHERE id = :job_id AND status IN (SELECT value FROM json_each(:from_states))
RETURNING id;

-- name: delete_job
-- Delete one job that is in :from_states (never running) and that no waiting job depends on;
-- its attempts, events, blobs and edges go by ON DELETE CASCADE. RETURNING feeds the hourly
-- rollup (the same columns, in the same order, as prune_batch).
DELETE FROM jobs
WHERE id = :job_id AND status IN (SELECT value FROM json_each(:from_states))
  AND NOT EXISTS (SELECT 1 FROM job_deps AS d JOIN jobs AS w ON w.id = d.job_id
                  WHERE d.upstream_id = jobs.id AND w.status = 'waiting')
RETURNING queue, type, status, run_at, started_at, finished_at;
