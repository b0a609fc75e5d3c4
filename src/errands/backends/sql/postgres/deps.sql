-- Dependencies (backends/deps.py, docs/pipelines.md): the edges of job_deps, written with the dependent
-- job and closed in the transaction that makes their upstream final. The same names,
-- parameters and result columns as sqlite/deps.sql; :job_ids is a bigint array here.

-- name: upstream_states
-- The state of each named upstream that exists (enqueue after=[…]: unknown ids are refused).
-- FOR SHARE: an upstream being finished by another transaction is read once that commits, and
-- one read here is not finished until this enqueue commits, so the new edge is either closed
-- now (the upstream is final) or seen open by the transaction that makes it final.
SELECT id, status FROM jobs WHERE id = ANY(CAST(:job_ids AS bigint[])) ORDER BY id FOR SHARE;

-- name: insert_deps
-- The edges of new dependents: :rows is a JSON array of [job_id, upstream_id, on_failure,
-- upstream_status] (upstream_status: the state of an upstream already final, else null).
INSERT INTO job_deps (job_id, upstream_id, on_failure, upstream_status)
SELECT (e->>0)::bigint, (e->>1)::bigint, e->>2, e->>3
FROM jsonb_array_elements(CAST(:rows AS jsonb)) AS e;

-- name: close_edges
-- These jobs just became final: close their open edges with the state each reached, and
-- return the dependents to look at. One probe of job_deps_upstream per job, so a batch of
-- jobs that nothing depends on costs next to nothing.
UPDATE job_deps AS d SET upstream_status = j.status
FROM jobs AS j
WHERE j.id = d.upstream_id AND d.upstream_id = ANY(CAST(:job_ids AS bigint[]))
  AND d.upstream_status IS NULL
RETURNING d.job_id, d.upstream_id;

-- name: lock_waiting
-- The dependents among these that are still waiting, locked in id order: of two
-- transactions closing a dependent's last two edges, the second waits here for the first to
-- commit, and its next statement (a new snapshot) sees both edges closed.
SELECT id FROM jobs
WHERE id = ANY(CAST(:job_ids AS bigint[])) AND status = 'waiting'
ORDER BY id
FOR UPDATE;

-- name: ready_waiting
-- The waiting jobs among these with no open edge left (job_deps_open: one probe each), and
-- whether an upstream they must see succeed did not (:succeeded binds the state).
SELECT w.id,
       EXISTS (SELECT 1 FROM job_deps AS f
               WHERE f.job_id = w.id AND f.on_failure = 'cancel'
                 AND f.upstream_status <> :succeeded) AS upstream_failed
FROM jobs AS w
WHERE w.id = ANY(CAST(:job_ids AS bigint[])) AND w.status = 'waiting'
  AND NOT EXISTS (SELECT 1 FROM job_deps AS o WHERE o.job_id = w.id AND o.upstream_status IS NULL)
  -- a job parked in ctx.wait_for() waits for its signal, not for upstreams (durable-steps.md)
  AND NOT EXISTS (SELECT 1 FROM job_steps AS s
                  WHERE s.job_id = w.id AND s.kind = 'wait' AND s.finished_at IS NULL)
ORDER BY w.id;

-- name: release_waiting
-- Queue waiting jobs whose upstreams are all final (fenced on the waiting state, so each is
-- released once); a run_at in the past becomes now, so its wait is counted from its release,
-- and so is its expires_in (expires_at).
UPDATE jobs SET status = :to_state, run_at = GREATEST(run_at, to_timestamp(:now)),
    expires_at = GREATEST(run_at, to_timestamp(:now)) + make_interval(secs => expires_in)
WHERE id = ANY(CAST(:job_ids AS bigint[])) AND status = :from_state
RETURNING id;

-- name: cancel_waiting_jobs
-- Cancel waiting jobs (an upstream did not succeed, or an operator), fenced like the release.
UPDATE jobs
SET status = :to_state, finished_at = to_timestamp(:now), error_code = :error_code,
    error_detail = :error_detail
WHERE id = ANY(CAST(:job_ids AS bigint[])) AND status = :from_state
RETURNING id;

-- name: doomed_chains
-- Below these just-cancelled jobs, every waiting dependent whose only open edge leads up a
-- chain of them with on_failure 'cancel': each is cancelled once that edge closes, so the
-- cascade settles the whole chain in one pass instead of a round of statements per step.
-- Returns each with the upstream whose cancel dooms it. A dependent with another open edge
-- is left out (the loop in backends/deps.py settles it when its edges close); the caller
-- locks the ones returned (lock_waiting) before it cancels them. Each step is a LATERAL probe
-- of job_deps_upstream by the step above, its open-edge test written so that job_deps_open
-- (every open edge) cannot serve it: a planner without statistics read all open edges at
-- each step (quadratic: 11 s for 3,000 steps).
WITH RECURSIVE c (id, up) AS (
    SELECT d.job_id, d.upstream_id FROM job_deps AS d
    WHERE d.upstream_id = ANY(CAST(:job_ids AS bigint[]))
      AND d.upstream_status IS NULL AND d.on_failure = 'cancel'
      AND EXISTS (SELECT 1 FROM jobs AS w WHERE w.id = d.job_id AND w.status = 'waiting')
      AND NOT EXISTS (SELECT 1 FROM job_deps AS o
                      WHERE o.job_id = d.job_id AND o.upstream_status IS NULL
                        AND o.upstream_id <> d.upstream_id)
    UNION
    SELECT n.job_id, n.upstream_id FROM c, LATERAL (
        SELECT d.job_id, d.upstream_id FROM job_deps AS d
        WHERE d.upstream_id = c.id AND COALESCE(d.upstream_status, '') = ''
          AND d.on_failure = 'cancel'
          AND EXISTS (SELECT 1 FROM jobs AS w WHERE w.id = d.job_id AND w.status = 'waiting')
          AND NOT EXISTS (SELECT 1 FROM job_deps AS o
                          WHERE o.job_id = d.job_id AND o.upstream_status IS NULL
                            AND o.upstream_id <> d.upstream_id)) AS n
)
SELECT id, up FROM c ORDER BY id;

-- name: reopen_edges
-- These jobs were retried (no longer final): their edges are open again; returns the
-- dependents, so the ones their failure cancelled can be revived.
UPDATE job_deps SET upstream_status = NULL
WHERE upstream_id = ANY(CAST(:job_ids AS bigint[]))
RETURNING job_id, upstream_id;

-- name: cancelled_by_upstream
-- The jobs among these that an upstream's failure cancelled, with what the rollup needs.
SELECT id, queue, type, status, run_at, started_at, finished_at FROM jobs
WHERE id = ANY(CAST(:job_ids AS bigint[])) AND status = 'cancelled'
  AND error_code = :error_code
FOR UPDATE;

-- name: revive_waiting
-- Back to waiting: a retried upstream will release (or cancel) them again.
UPDATE jobs
SET status = :to_state, finished_at = NULL, error_code = NULL, error_detail = NULL
WHERE id = ANY(CAST(:job_ids AS bigint[])) AND status = :from_state
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
SELECT DISTINCT d.upstream_id FROM jobs AS w
JOIN job_deps AS d ON d.job_id = w.id AND d.upstream_status IS NULL
JOIN jobs AS u ON u.id = d.upstream_id
WHERE w.status = 'waiting' AND u.status IN ('succeeded', 'failed', 'cancelled')
LIMIT :limit;

-- name: unreleased_waiting
-- Waiting jobs with no open edge left (every upstream final, or gone): released by nobody.
SELECT w.id FROM jobs AS w
WHERE w.status = 'waiting'
  AND NOT EXISTS (SELECT 1 FROM job_deps AS o WHERE o.job_id = w.id AND o.upstream_status IS NULL)
  -- a job parked in ctx.wait_for() waits for its signal, not for upstreams (durable-steps.md)
  AND NOT EXISTS (SELECT 1 FROM job_steps AS s
                  WHERE s.job_id = w.id AND s.kind = 'wait' AND s.finished_at IS NULL)
LIMIT :limit;

-- name: ids_matching_waiting
-- Ids of waiting jobs with optional type, queue and error code (bulk cancel), from
-- jobs_waiting (see ids_matching_queued in ops.sql).
SELECT id FROM jobs
WHERE status = 'waiting'
  AND (CAST(:type AS text) IS NULL OR type = :type)
  AND (CAST(:queue AS text) IS NULL OR queue = :queue)
  AND (CAST(:error_code AS text) IS NULL OR error_code = :error_code)
ORDER BY id;
