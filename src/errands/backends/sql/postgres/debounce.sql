-- Named queries for debounced enqueues (debounce=, docs/flow-control.md "Time rules"): the
-- same names, parameters and columns as sql/sqlite/debounce.sql.

-- name: queued_debounced
-- The queued, not yet started job of a debounce key, with what an enqueue must agree with;
-- locked, so concurrent enqueues of the key update it one after another.
SELECT id, type, queue, priority FROM jobs
WHERE debounce_key = :debounce_key AND status = 'queued' AND attempts = 0
FOR UPDATE;

-- name: debounce_job
-- A later enqueue of the key: its payload and headers replace the job's, and run_at moves to
-- :now + :debounce, never past the first enqueue (created_at) + :max_wait (NULL: no bound;
-- LEAST ignores it). Fenced on queued and not started. Returns the new run_at (unix seconds).
UPDATE jobs
SET payload = CAST(:payload AS jsonb), headers = CAST(:headers AS jsonb),
    run_at = LEAST(to_timestamp(:now + :debounce),
                   created_at + make_interval(secs => CAST(:max_wait AS double precision))),
    expires_at = LEAST(to_timestamp(:now + :debounce),
                       created_at + make_interval(secs => CAST(:max_wait AS double precision)))
                 + make_interval(secs => expires_in)
WHERE id = :id AND status = 'queued' AND attempts = 0
RETURNING id, EXTRACT(EPOCH FROM run_at)::double precision AS run_at;

-- name: insert_debounced_job
-- The first enqueue of a debounce key (or the first while its job runs): insert_job with the
-- key in debounce_key (unique_key stays NULL); a queued job of the key inserts nothing.
INSERT INTO jobs (queue, type, payload, status, priority, max_attempts, run_at, created_at,
                  headers, limit_key, limit_group, debounce_key, expires_in, expires_at,
                  deadline_at)
VALUES (:queue, :type, :payload, :to_state, :priority, :max_attempts, to_timestamp(:run_at),
        to_timestamp(:now), CAST(:headers AS jsonb), :limit_key, :limit_group, :debounce_key,
        CAST(:expires_in AS double precision),
        to_timestamp(CAST(:expires_at AS double precision)),
        to_timestamp(CAST(:deadline_at AS double precision)))
ON CONFLICT (debounce_key) WHERE debounce_key IS NOT NULL AND status = 'queued' AND attempts = 0
DO NOTHING
RETURNING id;
