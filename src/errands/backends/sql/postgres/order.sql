-- Order per key (docs/flow-control.md, backends/order.py): the head of an ordered value, the
-- lowest-id job of its key and group not yet finished. Same names as sql/sqlite/order.sql.
-- Read inside the claim's transaction, under the group's advisory lock (limited_groups).

-- name: order_head
-- The lowest-id job of (:key, :grp) that is queued (due or not: a retry's backoff, a snooze, a
-- sleep), running or waiting, and whether this worker may start it now (ready). Not locked:
-- the group's advisory lock keeps other claims off it, and claim_ids takes only a job still
-- queued (also what `errands check` reads, in a read-only transaction). The lowest id is the
-- value's first entry in jobs_order_head (migration 20), however long its backlog. Ready:
-- the claim's own filter, due_job (due.sql), on the head (its columns, unqualified, are j's).
SELECT j.id, j.priority, j.run_at, j.status,
       CASE WHEN {{due_job}}
            THEN 1 ELSE 0 END AS ready
FROM jobs AS j
WHERE j.id = (
    SELECT MIN(id) FROM jobs
    WHERE status IN ('waiting', 'queued', 'running') AND limit_key IS NOT NULL
      AND limit_key = :key AND limit_group = :grp);

-- name: order_failed_head
-- The lowest-id failed job of (:key, :grp) (order_on_failure="block": a failed job ahead of
-- the others holds them back until it is retried or cancelled).
SELECT MIN(id) AS id FROM jobs
WHERE status = 'failed' AND finished_at IS NOT NULL AND limit_key = :key AND limit_group = :grp;

-- name: order_queued_groups
-- The groups of some keys (:keys, a JSON array) with queued jobs, up to :n: where `errands
-- check` looks for a blocked value.
SELECT DISTINCT limit_key, limit_group FROM jobs
WHERE status = 'queued' AND limit_key IS NOT NULL
  AND limit_key IN (SELECT jsonb_array_elements_text(CAST(:keys AS jsonb)))
ORDER BY limit_key, limit_group
LIMIT :n;
