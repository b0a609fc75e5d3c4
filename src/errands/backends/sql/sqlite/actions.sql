-- The operator's edits of jobs (backends/jobs_actions.py): delete, run now, priority, for a
-- chunk of ids at once (:job_ids, a JSON array). The PostgreSQL file keeps the same names,
-- parameters and result columns. Each edit is fenced on the jobs' state in its own statement
-- (:from_states, bound from errands.core.states), so a job a worker claimed in between is left
-- alone, never forced.

-- name: action_jobs
-- The jobs an operator's edit reads first (PostgreSQL: locked, in id order).
SELECT id, status, priority, run_at FROM jobs
WHERE id IN (SELECT value FROM json_each(:job_ids))
ORDER BY id;

-- name: waiting_dependents
-- Of these jobs, those a waiting job depends on, each with the lowest such job's id (a delete
-- refuses them, as prune does). Read after action_jobs locked them (PostgreSQL), so no edge
-- to them can be added until the delete commits: an enqueue after=[…] share-locks its
-- upstreams first.
SELECT d.upstream_id AS id, MIN(d.job_id) AS waiting_dependent
FROM job_deps AS d JOIN jobs AS w ON w.id = d.job_id
WHERE d.upstream_id IN (SELECT value FROM json_each(:job_ids)) AND w.status = 'waiting'
GROUP BY d.upstream_id;

-- name: run_jobs_now
-- Run now: queued jobs whose run_at is still ahead become due at :now (a scheduled job, or a
-- retry waiting out its backoff). A job not returned was claimed or made due meanwhile.
UPDATE jobs SET run_at = :now
WHERE id IN (SELECT value FROM json_each(:job_ids))
  AND status IN (SELECT value FROM json_each(:from_states)) AND run_at > :now
RETURNING id;

-- name: set_jobs_priority
-- A new priority for jobs not yet claimed (queued or waiting).
UPDATE jobs SET priority = :priority
WHERE id IN (SELECT value FROM json_each(:job_ids))
  AND status IN (SELECT value FROM json_each(:from_states))
RETURNING id;

-- name: delete_jobs
-- Delete the jobs in :from_states (never running) that no waiting job depends on; their
-- attempts, events, blobs and edges go by ON DELETE CASCADE. RETURNING feeds the hourly rollup
-- (after the id, the same columns in the same order as prune_batch).
DELETE FROM jobs
WHERE id IN (SELECT value FROM json_each(:job_ids))
  AND status IN (SELECT value FROM json_each(:from_states))
  AND NOT EXISTS (SELECT 1 FROM job_deps AS d JOIN jobs AS w ON w.id = d.job_id
                  WHERE d.upstream_id = jobs.id AND w.status = 'waiting')
RETURNING id, queue, type, status, run_at, started_at, finished_at;
