-- Dependencies (backends/deps.py, docs/pipelines.md): the edges of job_deps, written with the dependent
-- job and closed in the transaction that makes their upstream final. The same names,
-- parameters and result columns as postgres/deps.sql; :job_ids is a JSON array of ids here.

-- name: upstream_states
-- The state of each named upstream that exists (enqueue after=[…]: unknown ids are refused).
SELECT id, status FROM jobs WHERE id IN (SELECT value FROM json_each(:job_ids)) ORDER BY id;

-- name: insert_deps
-- The edges of new dependents: :rows is a JSON array of [job_id, upstream_id, on_failure,
-- upstream_status] (upstream_status: the state of an upstream already final, else null).
INSERT INTO job_deps (job_id, upstream_id, on_failure, upstream_status)
SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]'),
       json_extract(value, '$[3]')
FROM json_each(:rows);

-- name: close_edges
-- These jobs just became final: close their open edges with the state each reached, and
-- return the dependents to look at. One probe of job_deps_upstream per job, so a batch of
-- jobs that nothing depends on costs next to nothing.
UPDATE job_deps
SET upstream_status = (SELECT j.status FROM jobs AS j WHERE j.id = job_deps.upstream_id)
WHERE upstream_id IN (SELECT value FROM json_each(:job_ids)) AND upstream_status IS NULL
RETURNING job_id, upstream_id;

-- name: lock_waiting
-- The dependents among these that are still waiting, in id order (run only where writers
-- run concurrently, concurrent_writers: PostgreSQL locks them here; SQLite keeps it for parity:
-- its write transaction already excludes every other writer).
SELECT id FROM jobs
WHERE id IN (SELECT value FROM json_each(:job_ids)) AND status = 'waiting'
ORDER BY id;

-- name: ready_waiting
-- The waiting jobs among these with no open edge left (job_deps_open: one probe each), and
-- whether an upstream they must see succeed did not (:succeeded binds the state).
SELECT w.id,
       EXISTS (SELECT 1 FROM job_deps AS f
               WHERE f.job_id = w.id AND f.on_failure = 'cancel'
                 AND f.upstream_status <> :succeeded) AS upstream_failed
FROM jobs AS w
WHERE w.id IN (SELECT value FROM json_each(:job_ids)) AND w.status = 'waiting'
  AND NOT EXISTS (SELECT 1 FROM job_deps AS o WHERE o.job_id = w.id AND o.upstream_status IS NULL)
  -- a job parked in ctx.wait_for() waits for its signal, not for upstreams (durable-steps.md)
  AND NOT EXISTS (SELECT 1 FROM job_steps AS s
                  WHERE s.job_id = w.id AND s.kind = 'wait' AND s.finished_at IS NULL)
ORDER BY w.id;

-- name: release_waiting
-- Queue waiting jobs whose upstreams are all final (fenced on the waiting state, so each is
-- released once); a run_at in the past becomes now, so its wait is counted from its release,
-- and so is its expires_in (expires_at).
UPDATE jobs SET status = :to_state, run_at = MAX(run_at, :now),
    expires_at = MAX(run_at, :now) + expires_in
WHERE id IN (SELECT value FROM json_each(:job_ids)) AND status = :from_state
RETURNING id;

-- name: cancel_waiting_jobs
-- Cancel waiting jobs (an upstream did not succeed, or an operator), fenced like the release.
UPDATE jobs
SET status = :to_state, finished_at = :now, error_code = :error_code, error_detail = :error_detail
WHERE id IN (SELECT value FROM json_each(:job_ids)) AND status = :from_state
RETURNING id;

-- name: doomed_chains
-- Below these just-cancelled jobs, every waiting dependent whose only open edge leads up a
-- chain of them with on_failure 'cancel': each is cancelled once that edge closes, so the
-- cascade settles the whole chain in one pass instead of a round of statements per step.
-- Returns each with the upstream whose cancel dooms it. A dependent with another open edge
-- is left out (the loop in backends/deps.py settles it when its edges close).
WITH RECURSIVE c (id, up) AS (
    SELECT d.job_id, d.upstream_id FROM job_deps AS d
    WHERE d.upstream_id IN (SELECT value FROM json_each(:job_ids))
      AND d.upstream_status IS NULL AND d.on_failure = 'cancel'
      AND EXISTS (SELECT 1 FROM jobs AS w WHERE w.id = d.job_id AND w.status = 'waiting')
      AND NOT EXISTS (SELECT 1 FROM job_deps AS o
                      WHERE o.job_id = d.job_id AND o.upstream_status IS NULL
                        AND o.upstream_id <> d.upstream_id)
    UNION
    SELECT d.job_id, d.upstream_id FROM c JOIN job_deps AS d ON d.upstream_id = c.id
    WHERE d.upstream_status IS NULL AND d.on_failure = 'cancel'
      AND EXISTS (SELECT 1 FROM jobs AS w WHERE w.id = d.job_id AND w.status = 'waiting')
      AND NOT EXISTS (SELECT 1 FROM job_deps AS o
                      WHERE o.job_id = d.job_id AND o.upstream_status IS NULL
                        AND o.upstream_id <> d.upstream_id)
)
SELECT id, up FROM c ORDER BY id;

-- name: reopen_edges
-- These jobs were retried (no longer final): their edges are open again; returns the
-- dependents, so the ones their failure cancelled can be revived.
UPDATE job_deps SET upstream_status = NULL
WHERE upstream_id IN (SELECT value FROM json_each(:job_ids))
RETURNING job_id, upstream_id;

-- name: cancelled_by_upstream
-- The jobs among these that an upstream's failure cancelled, with what the rollup needs.
SELECT id, queue, type, status, run_at, started_at, finished_at FROM jobs
WHERE id IN (SELECT value FROM json_each(:job_ids)) AND status = 'cancelled'
  AND error_code = :error_code;

-- name: revive_waiting
-- Back to waiting: a retried upstream will release (or cancel) them again.
UPDATE jobs
SET status = :to_state, finished_at = NULL, error_code = NULL, error_detail = NULL
WHERE id IN (SELECT value FROM json_each(:job_ids)) AND status = :from_state
RETURNING id;

-- name: job_upstream
-- The jobs a job was enqueued after (ctx.upstream(), show, deps), in id order.
SELECT j.*, d.on_failure FROM job_deps AS d JOIN jobs AS j ON j.id = d.upstream_id
WHERE d.job_id = :job_id ORDER BY j.id;

-- name: job_downstream
-- The jobs enqueued after a job (show, deps), in id order.
SELECT j.*, d.on_failure FROM job_deps AS d JOIN jobs AS j ON j.id = d.job_id
WHERE d.upstream_id = :job_id ORDER BY j.id;

-- name: upstream_counts
-- A batch's members (its callback's upstream jobs) per state.
SELECT j.status, COUNT(*) AS n FROM job_deps AS d JOIN jobs AS j ON j.id = d.upstream_id
WHERE d.job_id = :job_id GROUP BY j.status;

-- name: stale_edges
-- Open edges of waiting jobs whose upstream is final: what a release that never happened
-- leaves (it cannot, as every outcome closes its edges in its own transaction; a row changed
-- by hand could). The maintenance sweeper closes them as an outcome would; check counts them.
SELECT DISTINCT d.upstream_id FROM jobs AS w INDEXED BY jobs_waiting
JOIN job_deps AS d ON d.job_id = w.id AND d.upstream_status IS NULL
JOIN jobs AS u ON u.id = d.upstream_id
WHERE w.status = 'waiting' AND u.status IN ('succeeded', 'failed', 'cancelled')
LIMIT :limit;

-- name: unreleased_waiting
-- Waiting jobs with no open edge left (every upstream final, or gone): released by nobody.
SELECT w.id FROM jobs AS w INDEXED BY jobs_waiting
WHERE w.status = 'waiting'
  AND NOT EXISTS (SELECT 1 FROM job_deps AS o WHERE o.job_id = w.id AND o.upstream_status IS NULL)
  -- a job parked in ctx.wait_for() waits for its signal, not for upstreams (durable-steps.md)
  AND NOT EXISTS (SELECT 1 FROM job_steps AS s
                  WHERE s.job_id = w.id AND s.kind = 'wait' AND s.finished_at IS NULL)
LIMIT :limit;

-- name: ids_matching_waiting
-- Ids of waiting jobs with optional type, queue and error code (bulk cancel), from
-- jobs_waiting (see ids_matching_queued in ops.sql).
SELECT id FROM jobs INDEXED BY jobs_waiting
WHERE status = 'waiting'
  AND (:type IS NULL OR type = :type)
  AND (:queue IS NULL OR queue = :queue)
  AND (:error_code IS NULL OR error_code = :error_code)
ORDER BY id;
