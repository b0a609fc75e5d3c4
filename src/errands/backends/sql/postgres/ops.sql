-- Operations queries (stats, errors, bulk actions, retention, storage) for PostgreSQL: the same
-- names, parameters and SELECT/RETURNING column order as sql/sqlite/ops.sql. Times are bound as
-- float unix seconds and converted with to_timestamp(); timestamp columns come back as
-- timestamptz and the shared verbs turn them into seconds (PostgresBackend._epoch).

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
WHERE status = 'running' AND lease_expires_at < to_timestamp(:now - :grace);

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
WHERE status = 'queued' AND run_at <= to_timestamp(:now)
ORDER BY run_at, id
LIMIT 1;

-- name: oldest_due_by_queue
-- Per queue: its due queued jobs and when the longest-waiting of them fell due (a range of
-- jobs_queued_run_at, which holds the queue: the rows themselves are not read).
SELECT queue, COUNT(*) AS due, MIN(run_at) AS run_at FROM jobs
WHERE status = 'queued' AND run_at <= to_timestamp(:now)
GROUP BY queue
ORDER BY queue;

-- name: error_sample
-- The newest finished job of one error group (code and type), for its sample message: one
-- step down jobs_error_code (error_code, type, finished_at) for the newest finish, then the
-- highest id among the jobs that finished at that instant, whatever the group's size. (One
-- ORDER BY finished_at, id read the whole group and sorted it: the index's entries are not
-- in id order within a finish time, and it has no NULLS LAST to walk — 3,334 rows and about
-- 150 ms per group at 1,000,000 jobs, for each of the page's groups.)
SELECT id, attempts, error_detail FROM jobs
WHERE error_code = :error_code AND type = :type
  AND finished_at = (SELECT MAX(finished_at) FROM jobs
                     WHERE error_code = :error_code AND type = :type
                       AND finished_at IS NOT NULL)
ORDER BY id DESC
LIMIT 1;

-- name: retry_histogram
-- Attempts used by jobs that finished since :since (succeeded, failed or cancelled).
SELECT attempts, COUNT(*) AS n FROM jobs
WHERE status IN ('succeeded', 'failed', 'cancelled') AND finished_at >= to_timestamp(:since)
GROUP BY attempts ORDER BY attempts;

-- name: top_errors_in_rows
-- Most frequent error codes (with type) on jobs that failed or are waiting to retry since
-- :since; last_seen is when the newest of them finished (NULL: still waiting to retry).
-- Counted from the rows: for windows longer than the minute figures are kept (top_errors).
SELECT error_code, type, COUNT(*) AS n, MAX(finished_at) AS last_seen FROM jobs
WHERE error_code IS NOT NULL AND (finished_at >= to_timestamp(:since) OR finished_at IS NULL)
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
    FROM job_errors_minutely WHERE minute >= to_timestamp(:since)
    GROUP BY minute, error_code, type HAVING SUM(count) > 0
    UNION ALL
    SELECT error_code, type, COUNT(*), NULL FROM jobs
    WHERE error_code IS NOT NULL AND finished_at IS NULL
    GROUP BY error_code, type
) AS parts
GROUP BY error_code, type
ORDER BY n DESC, error_code, type
LIMIT :limit;

-- name: state_counts
-- Jobs per state, queue and type without visiting finished rows: queued and running from
-- their partial indexes (jobs_queued_run_at, jobs_running, which hold queue and type; each arm
-- names its state as a literal, so a generic plan can use them, and labels its rows with it:
-- reading the status column, which the indexes do not hold, would cost the index-only scan
-- its heap visits), final states from job_counts (kept by errands' writes, summed over the
-- writers' shards).
SELECT 'queued' AS status, queue, type, COUNT(*) AS count FROM jobs
WHERE status = 'queued' GROUP BY queue, type
UNION ALL
SELECT 'running' AS status, queue, type, COUNT(*) FROM jobs
WHERE status = 'running' GROUP BY queue, type
UNION ALL
SELECT 'waiting' AS status, queue, type, COUNT(*) FROM jobs 
WHERE status = 'waiting' GROUP BY queue, type
UNION ALL
SELECT status, queue, type, SUM(n) FROM job_counts
GROUP BY status, queue, type HAVING SUM(n) <> 0;

-- name: window_rows
-- Every measure per queue and bucket over the minutes starting at or after :since: one range
-- of the primary key per measure.
SELECT measure, queue, bucket, SUM(count) AS count, SUM(total) AS total, MAX(maximum) AS maximum
FROM job_stats_minutely
WHERE measure IN ('succeeded', 'failed', 'cancelled', 'wait', 'run')
  AND minute >= to_timestamp(:since)
GROUP BY measure, queue, bucket;

-- name: attempts_used_since
-- Attempts used by jobs that finished in the minutes starting at or after :since.
SELECT bucket, SUM(count) AS count FROM job_stats_minutely
WHERE measure IN ('succeeded', 'failed', 'cancelled') AND minute >= to_timestamp(:since)
GROUP BY bucket ORDER BY bucket;

-- name: forget_minutes
-- Drop minute figures older than :cutoff (prune).
DELETE FROM job_stats_minutely
WHERE measure IN ('succeeded', 'failed', 'cancelled', 'wait', 'run')
  AND minute < to_timestamp(:cutoff);

-- name: forget_error_minutes
-- Drop error figures older than :cutoff (prune), as forget_minutes.
DELETE FROM job_errors_minutely WHERE minute < to_timestamp(:cutoff);

-- name: fold_count_shards
-- Fold the job_counts rows of every writer's shard into shard 0, so readers sum few rows.
-- SKIP LOCKED: a row a worker's open transaction holds is left for the next run, so this never
-- waits on a worker (and cannot deadlock with one); shard 0 rows are taken in key order.
WITH gone AS (
    DELETE FROM job_counts WHERE ctid IN (
        SELECT ctid FROM job_counts WHERE shard <> 0 FOR UPDATE SKIP LOCKED
    )
    RETURNING status, queue, type, n
)
INSERT INTO job_counts AS c (status, queue, type, shard, n)
SELECT status, queue, type, 0, SUM(n) FROM gone
GROUP BY status, queue, type ORDER BY status, queue, type
ON CONFLICT (status, queue, type, shard) DO UPDATE SET n = c.n + EXCLUDED.n;

-- name: fold_minute_shards
-- As fold_count_shards, for the job_stats_minutely rows of minutes before :before (writers
-- only add to the current minute).
WITH gone AS (
    DELETE FROM job_stats_minutely WHERE ctid IN (
        SELECT ctid FROM job_stats_minutely
        WHERE measure IN ('succeeded', 'failed', 'cancelled', 'wait', 'run')
          AND minute < to_timestamp(:before) AND shard <> 0
        FOR UPDATE SKIP LOCKED
    )
    RETURNING measure, minute, queue, bucket, count, total, maximum
)
INSERT INTO job_stats_minutely AS m
    (measure, minute, queue, bucket, shard, count, total, maximum)
SELECT measure, minute, queue, bucket, 0, SUM(count), SUM(total), MAX(maximum) FROM gone
GROUP BY measure, minute, queue, bucket ORDER BY measure, minute, queue, bucket
ON CONFLICT (measure, minute, queue, bucket, shard) DO UPDATE SET
    count = m.count + EXCLUDED.count, total = m.total + EXCLUDED.total,
    maximum = GREATEST(m.maximum, EXCLUDED.maximum);

-- name: rollup_totals
-- All-time rolled-up counts per queue, type and outcome (the pruned part of the counters).
SELECT queue, type, outcome, SUM(count) AS n FROM job_stats_hourly GROUP BY queue, type, outcome;

-- name: queued_types
-- Queued jobs per queue and type, from the partial index jobs_queued_run_at that holds both.
SELECT queue, type, COUNT(*) AS n FROM jobs WHERE status = 'queued' GROUP BY queue, type
ORDER BY queue, type;

-- name: live_worker_counters
-- The counters (JSON) of workers not stopped and seen at or after :alive_since.
SELECT counters FROM workers
WHERE stopped_at IS NULL AND last_seen_at >= to_timestamp(:alive_since) AND counters IS NOT NULL;

-- name: workers_seen_since
-- Workers not stopped and seen at or after :alive_since, newest first.
SELECT id, hostname, pid, queues, types, schedules, concurrency, started_at, last_seen_at
FROM workers
WHERE stopped_at IS NULL AND last_seen_at >= to_timestamp(:alive_since)
ORDER BY last_seen_at DESC, id;

-- name: ids_matching_queued
-- Ids of queued jobs with optional type, queue and error code (bulk cancel). One query per
-- index that holds a state's jobs, chosen by the caller (jobs_operator.py): in a generic plan
-- a partial index serves only a query whose WHERE states its predicate as written.
SELECT id FROM jobs
WHERE status = 'queued'
  AND (CAST(:type AS text) IS NULL OR type = :type)
  AND (CAST(:queue AS text) IS NULL OR queue = :queue)
  AND (CAST(:error_code AS text) IS NULL OR error_code = :error_code)
ORDER BY id;

-- name: ids_matching_running
-- Ids of running jobs with optional type, queue and error code (bulk cancel), from jobs_running.
SELECT id FROM jobs
WHERE status = 'running'
  AND (CAST(:type AS text) IS NULL OR type = :type)
  AND (CAST(:queue AS text) IS NULL OR queue = :queue)
  AND (CAST(:error_code AS text) IS NULL OR error_code = :error_code)
ORDER BY id;

-- name: ids_matching_finished
-- Ids of jobs in one final state (:status) with optional type, queue and error code (bulk
-- retry), a range of jobs_finished: a final state always carries finished_at, and saying so
-- here is what lets the index serve the query.
SELECT id FROM jobs
WHERE status = :status AND finished_at IS NOT NULL
  AND (CAST(:type AS text) IS NULL OR type = :type)
  AND (CAST(:queue AS text) IS NULL OR queue = :queue)
  AND (CAST(:error_code AS text) IS NULL OR error_code = :error_code)
ORDER BY id;

-- name: prune_count
-- How many jobs of one terminal state finished before :cutoff (dry run), but none whose
-- unique_for still holds its key at :now.
SELECT COUNT(*) AS n FROM jobs WHERE status = :status AND finished_at < to_timestamp(:cutoff)
  AND NOT (unique_for IS NOT NULL
           AND finished_at + make_interval(secs => unique_for) > to_timestamp(:now));

-- name: prune_ids
-- Up to :limit jobs of one terminal state that finished before :cutoff, oldest first, but
-- none whose unique_for still holds its key at :now, none a waiting job still depends on (its outcome decides the waiting job's: docs/pipelines.md), locked:
-- the batch prune_batch deletes once their figures are taken off (uncount_jobs). SKIP LOCKED:
-- a row another transaction holds (a manual retry of a failed job, a second pruner) is left
-- for the next run instead of blocking this one or being deleted under it.
SELECT id FROM jobs
WHERE status = :status AND finished_at < to_timestamp(:cutoff)
  AND NOT (unique_for IS NOT NULL
           AND finished_at + make_interval(secs => unique_for) > to_timestamp(:now))
  AND NOT EXISTS (SELECT 1 FROM job_deps AS d JOIN jobs AS w ON w.id = d.job_id
                  WHERE d.upstream_id = jobs.id AND w.status = 'waiting')
ORDER BY finished_at, id
LIMIT :limit
FOR UPDATE SKIP LOCKED;

-- name: prune_batch
-- Delete the jobs prune_ids chose and locked (:job_ids, a JSON array); attempts, events and
-- blobs go by ON DELETE CASCADE. RETURNING feeds the rollup, written in the same transaction,
-- so a batch is counted exactly when it is deleted.
-- By tuple id (a Tid Scan), looked up by primary key, whatever the statistics say: the rows
-- are locked since prune_ids, so their ctid holds.
DELETE FROM jobs
WHERE ctid = ANY(ARRAY(
    SELECT j.ctid FROM jsonb_array_elements_text(CAST(:job_ids AS jsonb)) AS i (id)
    CROSS JOIN LATERAL (SELECT ctid FROM jobs WHERE id = i.id::bigint LIMIT 1) AS j
))
RETURNING queue, type, status, run_at, started_at, finished_at;

-- name: rollup_get
-- One rollup row, locked until the prune transaction commits its merge (read-merge-write:
-- FOR UPDATE makes a concurrent merger of the same hour wait instead of losing an update).
SELECT count, wait_sum, wait_max, run_sum, run_max, wait_hist, run_hist
FROM job_stats_hourly
WHERE hour = to_timestamp(:hour) AND queue = :queue AND type = :type AND outcome = :outcome
FOR UPDATE;

-- name: rollup_put
-- Write a merged rollup row.
INSERT INTO job_stats_hourly
    (hour, queue, type, outcome, count, wait_sum, wait_max, run_sum, run_max, wait_hist, run_hist)
VALUES (to_timestamp(:hour), :queue, :type, :outcome, :count, :wait_sum, :wait_max, :run_sum,
        :run_max, CAST(:wait_hist AS jsonb), CAST(:run_hist AS jsonb))
ON CONFLICT (hour, queue, type, outcome) DO UPDATE SET
    count = excluded.count, wait_sum = excluded.wait_sum, wait_max = excluded.wait_max,
    run_sum = excluded.run_sum, run_max = excluded.run_max,
    wait_hist = excluded.wait_hist, run_hist = excluded.run_hist;

-- name: wal_checkpoint
-- No-op: PostgreSQL checkpoints its WAL by itself. Same three columns as SQLite's
-- PRAGMA wal_checkpoint (busy, log frames, checkpointed frames).
SELECT 0 AS busy, 0 AS log, 0 AS checkpointed;

-- name: vacuum
-- Rewrite errands' own tables (never the application's) to give their free space back to the
-- filesystem. VACUUM FULL takes an exclusive lock on each table while it rewrites it: run it
-- off-peak, like SQLite's VACUUM. VACUUM cannot run in a transaction block: the shared verb
-- runs it on an autocommit connection (_read).
VACUUM FULL jobs, job_attempts, job_events, job_blobs, job_stats_hourly;

-- name: db_size
-- Bytes used by the database; free space inside the files has no cheap exact figure here.
SELECT pg_database_size(current_database()) AS bytes, CAST(NULL AS bigint) AS free_bytes;
