-- Named queries for debounced enqueues (debounce=, docs/flow-control.md "Time rules"): one
-- queued, not yet started job per debounce_key, whose payload and run_at each enqueue of the
-- key replaces. The PostgreSQL file uses the same names.

-- name: queued_debounced
-- The queued, not yet started job of a debounce key, with what an enqueue must agree with.
SELECT id, type, queue, priority FROM jobs
WHERE debounce_key = :debounce_key AND status = 'queued' AND attempts = 0;

-- name: debounce_job
-- A later enqueue of the key: its payload and headers replace the job's, and run_at moves to
-- :now + :debounce, never past the first enqueue (created_at) + :max_wait (NULL: no bound).
-- Fenced on queued and not started. Returns the new run_at (unix seconds).
UPDATE jobs
SET payload = :payload, headers = :headers,
    run_at = MIN(:now + :debounce, COALESCE(created_at + :max_wait, :now + :debounce)),
    expires_at = MIN(:now + :debounce, COALESCE(created_at + :max_wait, :now + :debounce))
                 + expires_in
WHERE id = :id AND status = 'queued' AND attempts = 0
RETURNING id, run_at;

-- name: insert_debounced_job
-- The first enqueue of a debounce key (or the first while its job runs): insert_job with the
-- key in debounce_key (unique_key stays NULL); a queued job of the key inserts nothing.
INSERT INTO jobs (queue, type, payload, status, priority, max_attempts, run_at, created_at,
                  headers, limit_key, limit_group, debounce_key, expires_in, expires_at,
                  deadline_at)
VALUES (:queue, :type, :payload, :to_state, :priority, :max_attempts, :run_at, :now,
        :headers, :limit_key, :limit_group, :debounce_key, :expires_in, :expires_at,
        :deadline_at)
ON CONFLICT (debounce_key) WHERE debounce_key IS NOT NULL AND status = 'queued' AND attempts = 0
DO NOTHING
RETURNING id;
