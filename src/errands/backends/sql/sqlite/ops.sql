-- Operations queries (stats, errors, bulk actions, retention, storage) for SQLite.
-- The PostgreSQL file keeps the same names and the same SELECT/RETURNING column order.
-- Status values are literals where SQLite must see them to pick a partial index.

-- name: oldest_running
-- Running jobs, longest without a sign of life first, with their worker's registry row.
SELECT j.id, j.queue, j.type, j.attempts, j.worker_id,
       COALESCE(j.heartbeat_at, j.started_at) AS since, j.lease_expires_at,
       w.last_seen_at, w.stopped_at
FROM jobs j LEFT JOIN workers w ON w.id = j.worker_id
WHERE j.status = 'running'
ORDER BY since, j.id
LIMIT :limit;

-- name: running_past_lease
-- How many running jobs are past their lease by more than :grace seconds.
SELECT COUNT(*) AS n FROM jobs
WHERE status = 'running' AND lease_expires_at < :now - :grace;

-- name: snoozing_jobs
-- Queued jobs started at least :min_attempts times whose latest attempt ended snoozed: a
-- handler snoozing in a loop (errands check). Reads the queued jobs and one attempt row each.
SELECT j.id, j.type, j.attempts FROM jobs AS j
WHERE j.status = 'queued' AND j.attempts >= :min_attempts
  AND EXISTS (SELECT 1 FROM job_attempts AS a
              WHERE a.job_id = j.id AND a.attempt = j.attempts AND a.status = 'snoozed')
ORDER BY j.attempts DESC, j.id
LIMIT :limit;

-- name: oldest_due
-- The queued job that has been due the longest (uses jobs_queued_run_at).
SELECT id, queue, type, run_at FROM jobs
WHERE status = 'queued' AND run_at <= :now
ORDER BY run_at, id
LIMIT 1;

-- name: oldest_due_by_queue
-- Per queue: its due queued jobs and when the longest-waiting of them fell due (a range of
-- jobs_queued_run_at, which holds the queue: the rows themselves are not read).
SELECT queue, COUNT(*) AS due, MIN(run_at) AS run_at FROM jobs
WHERE status = 'queued' AND run_at <= :now
GROUP BY queue
ORDER BY queue;

-- name: error_sample
-- The newest finished job of one error group (code and type), for its sample message: one
-- step down jobs_error_code (error_code, type, finished_at), whatever the group's size.
SELECT id, attempts, error_detail FROM jobs
WHERE error_code = :error_code AND type = :type AND finished_at IS NOT NULL
ORDER BY finished_at DESC, id DESC
LIMIT 1;

-- name: retry_histogram
-- Attempts used by jobs that finished since :since (succeeded, failed or cancelled).
SELECT attempts, COUNT(*) AS n FROM jobs
WHERE status IN ('succeeded', 'failed', 'cancelled') AND finished_at >= :since
GROUP BY attempts ORDER BY attempts;

-- name: top_errors_in_rows
-- Most frequent error codes (with type) on jobs that failed or are waiting to retry since
-- :since; last_seen is when the newest of them finished (NULL: still waiting to retry).
-- Counted from the rows: for windows longer than the minute figures are kept (top_errors).
SELECT error_code, type, COUNT(*) AS n, MAX(finished_at) AS last_seen FROM jobs
WHERE error_code IS NOT NULL AND (finished_at >= :since OR finished_at IS NULL)
GROUP BY error_code, type
ORDER BY n DESC, error_code, type
LIMIT :limit;

-- name: top_errors
-- top_errors_in_rows over the minutes starting at or after :since, bounded by groups: the jobs
-- that finished with an error code from job_errors_minutely (kept by the triggers and the
-- worker's batches), the jobs not finished that carry one (waiting for or running a retry)
-- from the partial index jobs_errors_unfinished.
SELECT error_code, type, SUM(n) AS n, MAX(last_seen) AS last_seen FROM (
    SELECT error_code, type, SUM(count) AS n, MAX(last_finished_at) AS last_seen
    FROM job_errors_minutely WHERE minute >= :since
    GROUP BY minute, error_code, type HAVING SUM(count) > 0
    UNION ALL
    SELECT error_code, type, COUNT(*), NULL FROM jobs INDEXED BY jobs_errors_unfinished
    WHERE error_code IS NOT NULL AND finished_at IS NULL
    GROUP BY error_code, type
)
GROUP BY error_code, type
ORDER BY n DESC, error_code, type
LIMIT :limit;

-- name: state_counts
-- Jobs per state, queue and type without visiting finished rows: queued and running from
-- their partial indexes (jobs_queued_run_at, jobs_running, which hold queue and type; each
-- arm names its state as a literal, which is what lets SQLite use a partial index, and labels
-- its rows with it rather than read the status column, which the indexes do not hold), final
-- states from job_counts (kept by errands' writes). INDEXED BY: left to itself SQLite walks
-- jobs_due, which holds neither column, and reads every queued row.
SELECT 'queued' AS status, queue, type, COUNT(*) AS count FROM jobs INDEXED BY jobs_queued_run_at
WHERE status = 'queued' GROUP BY queue, type
UNION ALL
SELECT 'running' AS status, queue, type, COUNT(*) FROM jobs INDEXED BY jobs_running
WHERE status = 'running' GROUP BY queue, type
UNION ALL
SELECT 'waiting' AS status, queue, type, COUNT(*) FROM jobs INDEXED BY jobs_waiting 
WHERE status = 'waiting' GROUP BY queue, type
UNION ALL
SELECT status, queue, type, SUM(n) FROM job_counts
GROUP BY status, queue, type HAVING SUM(n) <> 0;

-- name: window_rows
-- Every measure per queue and bucket over the minutes starting at or after :since: one range
-- of the primary key per measure.
SELECT measure, queue, bucket, SUM(count) AS count, SUM(total) AS total, MAX(maximum) AS maximum
FROM job_stats_minutely
WHERE measure IN ('succeeded', 'failed', 'cancelled', 'wait', 'run') AND minute >= :since
GROUP BY measure, queue, bucket;

-- name: attempts_used_since
-- Attempts used by jobs that finished in the minutes starting at or after :since.
SELECT bucket, SUM(count) AS count FROM job_stats_minutely
WHERE measure IN ('succeeded', 'failed', 'cancelled') AND minute >= :since
GROUP BY bucket ORDER BY bucket;

-- name: forget_minutes
-- Drop minute figures older than :cutoff (prune).
DELETE FROM job_stats_minutely
WHERE measure IN ('succeeded', 'failed', 'cancelled', 'wait', 'run') AND minute < :cutoff;

-- name: forget_error_minutes
-- Drop error figures older than :cutoff (prune), as forget_minutes.
DELETE FROM job_errors_minutely WHERE minute < :cutoff;

-- name: fold_count_shards
-- PostgreSQL folds its writers' counter shards into shard 0; SQLite writes shard 0 only, so
-- here it is a statement that changes nothing (no result, as on PostgreSQL).
DELETE FROM job_counts WHERE 0;

-- name: fold_minute_shards
-- As fold_count_shards, for job_stats_minutely before :before (bound here only to keep the
-- dialects' parameters the same).
DELETE FROM job_stats_minutely WHERE 0 AND minute < :before;

-- name: rollup_totals
-- All-time rolled-up counts per queue, type and outcome (the pruned part of the counters).
SELECT queue, type, outcome, SUM(count) AS n FROM job_stats_hourly GROUP BY queue, type, outcome;

-- name: queued_types
-- Queued jobs per queue and type, from the partial index jobs_queued_run_at that holds both
-- (pinned as in state_counts).
SELECT queue, type, COUNT(*) AS n FROM jobs INDEXED BY jobs_queued_run_at
WHERE status = 'queued' GROUP BY queue, type
ORDER BY queue, type;

-- name: live_worker_counters
-- The counters (JSON) of workers not stopped and seen at or after :alive_since.
SELECT counters FROM workers
WHERE stopped_at IS NULL AND last_seen_at >= :alive_since AND counters IS NOT NULL;

-- name: workers_seen_since
-- Workers not stopped and seen at or after :alive_since, newest first.
SELECT id, hostname, pid, queues, types, schedules, concurrency, started_at, last_seen_at
FROM workers
WHERE stopped_at IS NULL AND last_seen_at >= :alive_since
ORDER BY last_seen_at DESC, id;

-- name: ids_matching_queued
-- Ids of queued jobs with optional type, queue and error code (bulk cancel). One query per
-- index that holds a state's jobs, chosen by the caller (jobs_operator.py): a partial index
-- serves only a query whose WHERE states its predicate as written, never a bound :status.
-- INDEXED BY in all three: for ORDER BY id SQLite would rather walk the whole table.
SELECT id FROM jobs INDEXED BY jobs_queued_run_at
WHERE status = 'queued'
  AND (:type IS NULL OR type = :type)
  AND (:queue IS NULL OR queue = :queue)
  AND (:error_code IS NULL OR error_code = :error_code)
ORDER BY id;

-- name: ids_matching_running
-- Ids of running jobs with optional type, queue and error code (bulk cancel), from jobs_running.
SELECT id FROM jobs INDEXED BY jobs_running
WHERE status = 'running'
  AND (:type IS NULL OR type = :type)
  AND (:queue IS NULL OR queue = :queue)
  AND (:error_code IS NULL OR error_code = :error_code)
ORDER BY id;

-- name: ids_matching_finished
-- Ids of jobs in one final state (:status) with optional type, queue and error code (bulk
-- retry), a range of jobs_finished: a final state always carries finished_at, and saying so
-- here is what lets the index serve the query.
SELECT id FROM jobs INDEXED BY jobs_finished
WHERE status = :status AND finished_at IS NOT NULL
  AND (:type IS NULL OR type = :type)
  AND (:queue IS NULL OR queue = :queue)
  AND (:error_code IS NULL OR error_code = :error_code)
ORDER BY id;

-- name: prune_count
-- How many jobs of one terminal state finished before :cutoff (dry run), but none whose
-- unique_for still holds its key at :now.
SELECT COUNT(*) AS n FROM jobs WHERE status = :status AND finished_at < :cutoff
  AND NOT (unique_for IS NOT NULL AND finished_at + unique_for > :now);

-- name: prune_ids
-- Up to :limit jobs of one terminal state that finished before :cutoff, oldest first, but
-- none whose unique_for still holds its key at :now, none a waiting job still depends on (its outcome decides the waiting job's: docs/pipelines.md): the
-- batch prune_batch deletes once their figures are taken off (uncount_jobs).
SELECT id FROM jobs WHERE status = :status AND finished_at < :cutoff
  AND NOT (unique_for IS NOT NULL AND finished_at + unique_for > :now)
  AND NOT EXISTS (SELECT 1 FROM job_deps AS d JOIN jobs AS w ON w.id = d.job_id
                  WHERE d.upstream_id = jobs.id AND w.status = 'waiting')
ORDER BY finished_at LIMIT :limit;

-- name: prune_batch
-- Delete the jobs prune_ids chose (:job_ids, a JSON array); attempts, events and blobs go by
-- ON DELETE CASCADE. RETURNING feeds the rollup, written in the same transaction, so a batch
-- is counted exactly when it is deleted.
DELETE FROM jobs WHERE id IN (SELECT value FROM json_each(:job_ids))
RETURNING queue, type, status, run_at, started_at, finished_at;

-- name: rollup_get
-- One rollup row (read inside the prune transaction before merging; PG adds FOR UPDATE).
SELECT count, wait_sum, wait_max, run_sum, run_max, wait_hist, run_hist
FROM job_stats_hourly
WHERE hour = :hour AND queue = :queue AND type = :type AND outcome = :outcome;

-- name: rollup_put
-- Write a merged rollup row.
INSERT INTO job_stats_hourly
    (hour, queue, type, outcome, count, wait_sum, wait_max, run_sum, run_max, wait_hist, run_hist)
VALUES (:hour, :queue, :type, :outcome, :count, :wait_sum, :wait_max, :run_sum, :run_max,
        :wait_hist, :run_hist)
ON CONFLICT (hour, queue, type, outcome) DO UPDATE SET
    count = excluded.count, wait_sum = excluded.wait_sum, wait_max = excluded.wait_max,
    run_sum = excluded.run_sum, run_max = excluded.run_max,
    wait_hist = excluded.wait_hist, run_hist = excluded.run_hist;

-- name: wal_checkpoint
-- Fold the WAL back into the database file and truncate it (after large prunes).
PRAGMA wal_checkpoint(TRUNCATE);

-- name: vacuum
-- Rebuild the file to return free pages to the filesystem (off-peak: it locks the database).
VACUUM;

-- name: db_size
-- Bytes used by the database file (pages in use and free).
SELECT page_count * page_size AS bytes, freelist_count * page_size AS free_bytes
FROM pragma_page_count(), pragma_page_size(), pragma_freelist_count();
