-- Named queries for the SQLite backend. The PostgreSQL file uses the same names.
-- Format: "-- name: NAME" then a one-line description, then the statement.
-- Parameters are :named. Fenced transitions bind :from_state/:to_state from
-- errands.core.states.TRANSITIONS, so the guard here cannot drift from the state machine.

-- name: insert_job
-- Insert one job, its limit key and group with it (NULL: no limit); a unique_key already held
-- by an active job, or by a job that succeeded within its unique_for, inserts nothing.
INSERT INTO jobs (queue, type, payload, status, priority, max_attempts, run_at, created_at, unique_key,
                  headers, limit_key, limit_group, unique_for, expires_in, expires_at, deadline_at)
SELECT :queue, :type, :payload, :to_state, :priority, :max_attempts, :run_at, :now, :unique_key,
       :headers, :limit_key, :limit_group, :unique_for, :expires_in, :expires_at, :deadline_at
WHERE NOT EXISTS (SELECT 1 FROM jobs AS h
                  WHERE :unique_key IS NOT NULL AND h.unique_key = :unique_key
                    AND h.status = 'succeeded' AND h.unique_for IS NOT NULL
                    AND h.finished_at + h.unique_for > :now)
ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND status IN ('queued', 'running')
DO NOTHING
RETURNING id;

-- name: insert_jobs
-- Insert many jobs without unique keys in one statement; :batch is a JSON array of
-- [queue, type, payload_text, priority, max_attempts, run_at, limit_key, limit_group]. Rows go
-- in in array order, so the returned ids, sorted, are the jobs' ids in that order
-- (AUTOINCREMENT only grows).
INSERT INTO jobs (queue, type, payload, status, priority, max_attempts, run_at, created_at,
                  limit_key, limit_group)
SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]'),
       :to_state, json_extract(value, '$[3]'), json_extract(value, '$[4]'),
       json_extract(value, '$[5]'), :now, json_extract(value, '$[6]'), json_extract(value, '$[7]')
FROM json_each(:batch) ORDER BY key
RETURNING id;

-- name: insert_jobs_alike
-- Insert many jobs that differ only in payload (enqueue_many's common case: one type, its
-- defaults, due now) in one statement; :payloads is a JSON array of payload texts, the rest
-- are bound once. Cheaper than insert_jobs by the five fields it does not extract per row.
-- Rows go in in array order, so the returned ids, sorted, are the jobs' ids in that order.
INSERT INTO jobs (queue, type, payload, status, priority, max_attempts, run_at, created_at,
                  limit_key, limit_group)
SELECT :queue, :type, value, :to_state, :priority, :max_attempts, :run_at, :now, :limit_key,
       :limit_group
FROM json_each(:payloads) ORDER BY key
RETURNING id;

-- name: insert_jobs_alike_counted
-- insert_jobs_alike without RETURNING: for a dialect whose driver reports the statement's last
-- id and row count, and whose ids of one statement are consecutive (SQLite: AUTOINCREMENT
-- under the write lock; SQLJobs.counted_inserts). Saves the returned rows (~0.8 µs per job).
-- No ORDER BY key: json_each scans the array in order, and the sort it asked for was a temp
-- B-tree of the whole chunk (~0.2 µs per job); tests/client/test_enqueue.py checks that every
-- id of a run holds its own payload.
INSERT INTO jobs (queue, type, payload, status, priority, max_attempts, run_at, created_at,
                  limit_key, limit_group)
SELECT :queue, :type, value, :to_state, :priority, :max_attempts, :run_at, :now, :limit_key,
       :limit_group
FROM json_each(:payloads);

-- name: insert_enqueued_events_range
-- The ENQUEUED audit event of each job whose id is in [:first, :last] (jobs just written as
-- one consecutive range): the ids read from the primary key, not passed as a JSON array.
INSERT INTO job_events (job_id, ts, event, actor, detail)
SELECT id, :now, :event, :actor, NULL FROM jobs WHERE id BETWEEN :first AND :last;

-- name: insert_enqueued_events
-- The ENQUEUED audit event of each of many new jobs (:job_ids is a JSON array).
INSERT INTO job_events (job_id, ts, event, actor, detail)
SELECT value, :now, :event, :actor, NULL FROM json_each(:job_ids);

-- name: active_job_by_unique_key
-- The job holding a unique key: the active one, else one that succeeded within its unique_for.
SELECT id FROM (
    SELECT id, 0 AS rank FROM jobs WHERE unique_key = :unique_key AND status IN ('queued', 'running')
    UNION ALL
    SELECT id, 1 AS rank FROM jobs
    WHERE unique_key = :unique_key AND status = 'succeeded' AND unique_for IS NOT NULL
      AND finished_at + unique_for > :now
)
ORDER BY rank, id DESC LIMIT 1;

-- name: insert_event
-- Append one audit event.
INSERT INTO job_events (job_id, ts, event, actor, detail) VALUES (:job_id, :ts, :event, :actor, :detail);

-- name: insert_events
-- Append many audit events: :rows is a JSON array of [job_id, ts, event, actor, detail].
INSERT INTO job_events (job_id, ts, event, actor, detail)
SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]'),
       json_extract(value, '$[3]'), json_extract(value, '$[4]')
FROM json_each(:rows);

-- name: claim
-- Claim up to :limit due jobs of the worker's types and queues, highest priority first.
-- Unlimited jobs only (limited ones: flow.sql, claim_limited_*), none of a paused queue: what
-- the claim may take is the fragment due_job (due.sql), here as in every claim query.
-- error_code is the previous attempt's (a claim does not clear it): LOST:LEASE_EXPIRED puts
-- the job in quarantine (worker/quarantine.py).
-- due_job's status = 'queued' is a literal (not bound) so SQLite can use the partial index
-- jobs_due; INDEXED BY pins it: left to itself the planner may take another index over the queued rows
-- and sort them all on each claim (measured with jobs_status_queue_type, dropped by migration
-- 0006: 35 us/job at 20k queued, vs ~5 with jobs_due).
-- :after_priority, :after_run_at and :after_id are always above every priority, 0 and 0 here: PostgreSQL's
-- claim resumes past the dead index entries of claimed jobs (backends/claim_position.py), but
-- SQLite removes a claimed job's entry with the change itself, so its claim scans from the
-- front and these terms hold for every job.
UPDATE jobs
SET status = :to_state,
    attempts = attempts + 1,
    worker_id = :worker_id,
    started_at = :now,
    heartbeat_at = NULL,
    lease_expires_at = :now + :lease_seconds,
    finished_at = NULL
WHERE id IN (
    SELECT id FROM jobs INDEXED BY jobs_due
    WHERE {{due_job}}
      AND limit_key IS NULL
      AND priority < :after_priority AND run_at >= :after_run_at AND id > :after_id
    ORDER BY priority DESC, run_at, id
    LIMIT :limit
)
RETURNING id, queue, type, payload, priority, attempts, max_attempts, run_at, created_at, cancel_requested,
          headers, error_code;

-- name: claim_behind
-- The first job the claim would take at priority :after_priority, from the front of jobs_due
-- up to a position (:after_run_at, :after_id), or none. PostgreSQL's claim position is probed
-- with it (backends/claim_position.py); SQLite's claim always scans from the front, so only
-- the probe's own checks run this here.
SELECT run_at, id FROM jobs INDEXED BY jobs_due
WHERE {{due_job}}
  AND limit_key IS NULL
  AND priority = :after_priority
  AND (run_at < :after_run_at OR (run_at = :after_run_at AND id <= :after_id))
ORDER BY priority DESC, run_at, id
LIMIT 1;

-- name: open_attempts
-- Open the attempt rows of just-claimed jobs (:job_ids is a JSON array).
INSERT INTO job_attempts (job_id, attempt, worker_id, started_at, status)
SELECT id, attempts, worker_id, :now, :status FROM jobs
WHERE id IN (SELECT value FROM json_each(:job_ids));

-- name: succeed_jobs
-- Fenced, batched: record success of many held attempts; returns (id, attempt) applied.
-- :batch is a JSON array of [job_id, attempt, started_at, result_json_text_or_null].
-- The unary + keeps the planner from driving the join by the status index: each batch row
-- must be one primary-key lookup.
UPDATE jobs
SET status = :to_state, started_at = b.started_at, finished_at = :now, result = b.result,
    lease_expires_at = NULL, error_code = NULL, error_detail = NULL
FROM (SELECT json_extract(value, '$[0]') AS id, json_extract(value, '$[1]') AS attempt,
             json_extract(value, '$[2]') AS started_at, json_extract(value, '$[3]') AS result
      FROM json_each(:batch)) AS b
WHERE jobs.id = b.id AND jobs.attempts = b.attempt AND +jobs.status = :from_state
RETURNING jobs.id, jobs.attempts;

-- name: insert_claimed_events
-- The CLAIMED audit event of each just-claimed job (:job_ids is a JSON array), its attempt
-- number read from the row rather than shipped in as JSON.
INSERT INTO job_events (job_id, ts, event, actor, detail)
SELECT id, :now, :event, worker_id, json_object('attempt', attempts) FROM jobs
WHERE id IN (SELECT value FROM json_each(:job_ids));

-- name: close_succeeded_attempts
-- Close the attempt rows of applied successes; :batch is succeed_jobs' own batch.
UPDATE job_attempts
SET status = :status, started_at = b.started_at, finished_at = :now,
    error_code = NULL, error_detail = NULL, traceback_ref = NULL
FROM (SELECT json_extract(value, '$[0]') AS job_id, json_extract(value, '$[1]') AS attempt,
             json_extract(value, '$[2]') AS started_at
      FROM json_each(:batch)) AS b
WHERE job_attempts.job_id = b.job_id AND job_attempts.attempt = b.attempt;

-- name: insert_succeeded_events
-- The SUCCEEDED audit event of each applied success; :batch is succeed_jobs' own batch.
INSERT INTO job_events (job_id, ts, event, actor, detail)
SELECT json_extract(value, '$[0]'), :now, :event, :actor,
       json_object('attempt', json_extract(value, '$[1]'))
FROM json_each(:batch);

-- name: fail_job
-- Fenced: final failure (attempts exhausted or not retryable).
UPDATE jobs
SET status = :to_state, started_at = :started_at, finished_at = :now,
    lease_expires_at = NULL, error_code = :error_code, error_detail = :error_detail
WHERE id = :job_id AND attempts = :attempt AND status = :from_state;

-- name: schedule_retry
-- Fenced: failed attempt with attempts left goes back to queued at a later run_at.
UPDATE jobs
SET status = :to_state, started_at = :started_at, run_at = :retry_at,
    lease_expires_at = NULL, error_code = :error_code, error_detail = :error_detail
WHERE id = :job_id AND attempts = :attempt AND status = :from_state;

-- name: cancel_running_job
-- Fenced: a running job that saw its cancel request ends cancelled.
UPDATE jobs
SET status = :to_state, started_at = :started_at, finished_at = :now,
    lease_expires_at = NULL, error_code = :error_code, error_detail = :error_detail
WHERE id = :job_id AND attempts = :attempt AND status = :from_state;

-- name: release_job
-- Fenced: an unstarted prefetched job handed back at shutdown; the attempt is not counted.
UPDATE jobs
SET status = :to_state, attempts = attempts - 1, worker_id = NULL, lease_expires_at = NULL
WHERE id = :job_id AND attempts = :attempt AND status = :from_state;

-- name: delete_attempt
-- Remove the attempt row of a released (never started) attempt.
DELETE FROM job_attempts WHERE job_id = :job_id AND attempt = :attempt;

-- name: close_attempts
-- Close attempt rows with their outcomes (started_at is the real start, not the claim).
-- :batch is a JSON array of [job_id, attempt, status, started_at, error_code, error_detail,
-- traceback_ref].
UPDATE job_attempts
SET status = b.status, started_at = b.started_at, finished_at = :now,
    error_code = b.error_code, error_detail = b.error_detail, traceback_ref = b.traceback_ref
FROM (SELECT json_extract(value, '$[0]') AS job_id, json_extract(value, '$[1]') AS attempt,
             json_extract(value, '$[2]') AS status, json_extract(value, '$[3]') AS started_at,
             json_extract(value, '$[4]') AS error_code, json_extract(value, '$[5]') AS error_detail,
             json_extract(value, '$[6]') AS traceback_ref
      FROM json_each(:batch)) AS b
WHERE job_attempts.job_id = b.job_id AND job_attempts.attempt = b.attempt;

-- name: lose_attempt
-- Close an attempt whose lease expired (its worker is gone or stalled).
UPDATE job_attempts
SET status = :status, finished_at = :now, error_code = :error_code, error_detail = :error_detail
WHERE job_id = :job_id AND attempt = :attempt;

-- name: insert_blob
-- Store a large text (a full traceback) outside the jobs row.
INSERT INTO job_blobs (job_id, kind, body, created_at) VALUES (:job_id, :kind, :body, :now)
RETURNING id;

-- name: get_blob
-- Read a stored blob by id.
SELECT body FROM job_blobs WHERE id = :id;

-- name: heartbeat
-- Fenced: extend the lease of a job this worker still holds.
UPDATE jobs SET heartbeat_at = :now, lease_expires_at = :now + :lease_seconds
WHERE id = :job_id AND attempts = :attempt AND status = :from_state AND worker_id = :worker_id;

-- name: expired_leases
-- Running jobs whose lease has expired, oldest first.
-- :after is where the scan starts (backends/lease_sweep.py); SQLite's sweep passes 0, the
-- front: its index drops a finished job's entry with the change itself.
SELECT id, attempts, max_attempts, worker_id FROM jobs INDEXED BY jobs_running
WHERE status = 'running' AND lease_expires_at < :now AND lease_expires_at >= :after
ORDER BY lease_expires_at LIMIT :limit;

-- name: expired_leases_seen
-- How many running jobs in the sweep's range have an expired lease (PostgreSQL's sweep
-- compares it with what SKIP LOCKED returned; SQLite's never skips).
SELECT COUNT(*) AS n FROM jobs INDEXED BY jobs_running
WHERE status = 'running' AND lease_expires_at < :now AND lease_expires_at >= :after;

-- name: expired_lease_behind
-- The first expired lease before :after (or none): PostgreSQL's rescuer probes behind its
-- sweep's position with it (backends/lease_sweep.py); SQLite's sweep starts at the front, so
-- only the probe's own checks run this here.
SELECT lease_expires_at FROM jobs INDEXED BY jobs_running
WHERE status = 'running' AND lease_expires_at < :now AND lease_expires_at < :after
ORDER BY lease_expires_at LIMIT 1;

-- name: recover_job
-- Fenced: a lost attempt goes back to queued (attempts left) or to failed (exhausted).
UPDATE jobs
SET status = :to_state, run_at = CASE WHEN :to_state = 'queued' THEN :now ELSE run_at END,
    finished_at = CASE WHEN :to_state = 'queued' THEN NULL ELSE :now END,
    lease_expires_at = NULL, error_code = :error_code, error_detail = :error_detail
WHERE id = :job_id AND attempts = :attempt AND status = :from_state;

-- name: retry_outcome
-- The finished outcome a manual retry is about to clear, for the hourly rollup (the same
-- columns, in the same order, as prune_batch returns).
SELECT queue, type, status, run_at, started_at, finished_at FROM jobs
WHERE id = :job_id AND status IN (SELECT value FROM json_each(:from_states));

-- name: retry_job
-- Manual retry of a failed or cancelled job; it gets at least one more attempt, and no
-- start-by time nor deadline (an operator's retry lifts expires_in and deadline).
UPDATE jobs
SET status = :to_state, run_at = :now, finished_at = NULL, lease_expires_at = NULL,
    cancel_requested = 0, max_attempts = MAX(max_attempts, attempts + 1), expires_at = NULL,
    deadline_at = NULL
WHERE id = :job_id AND status IN (SELECT value FROM json_each(:from_states))
RETURNING id;

-- name: cancel_queued_job
-- Cancel a job that has not started.
UPDATE jobs
SET status = :to_state, finished_at = :now, error_code = :error_code, error_detail = :error_detail
WHERE id = :job_id AND status = :from_state
RETURNING id;

-- name: request_cancel
-- Ask the worker holding a running job to stop it.
UPDATE jobs SET cancel_requested = 1 WHERE id = :job_id AND status = 'running'
RETURNING id;

-- name: cancel_requested
-- Which of these held jobs have a cancel request.
SELECT id FROM jobs
WHERE id IN (SELECT value FROM json_each(:job_ids)) AND cancel_requested = 1 AND status = 'running';

-- name: next_due
-- When the next queued job this worker could run falls due (a paused queue has none), of those
-- due after :after.
SELECT MIN(run_at) AS next_run_at FROM jobs
WHERE status = 'queued' AND run_at > :after
  AND type IN (SELECT value FROM json_each(:types))
  AND (:queues IS NULL OR queue IN (SELECT value FROM json_each(:queues)))
  AND queue NOT IN (SELECT queue FROM queue_pauses)
  AND NOT EXISTS (SELECT 1 FROM queue_pauses WHERE queue = '*');

-- name: get_job
-- One job by id.
SELECT * FROM jobs WHERE id = :id;

-- name: list_jobs
-- Jobs matching optional filters, newest first, keyset-paginated by id.
SELECT * FROM jobs
WHERE (:status IS NULL OR status = :status)
  AND (:type IS NULL OR type = :type)
  AND (:queue IS NULL OR queue = :queue)
  AND (:error_code IS NULL OR error_code = :error_code)
  AND (:before_id IS NULL OR id < :before_id)
ORDER BY id DESC
LIMIT :limit;

-- name: newest_job_id
-- The highest job id (the top of a bounded search's first window).
SELECT MAX(id) AS id FROM jobs;

-- name: search_jobs
-- Text search over one window of ids (:floor_id <= id < :before_id, a range of the primary
-- key: the caller bounds it), with the exact filters: type, queue or error code starting with
-- :prefix (a LIKE pattern, lower case, escaped), or :needle (lower case) in the error message
-- or the payload's JSON text. lower() folds ASCII letters only.
SELECT * FROM jobs
WHERE id < :before_id AND id >= :floor_id
  AND (:status IS NULL OR status = :status)
  AND (:type IS NULL OR type = :type)
  AND (:queue IS NULL OR queue = :queue)
  AND (:error_code IS NULL OR error_code = :error_code)
  AND (lower(type) LIKE :prefix ESCAPE '\' OR lower(queue) LIKE :prefix ESCAPE '\'
       OR lower(COALESCE(error_code, '')) LIKE :prefix ESCAPE '\'
       OR instr(lower(COALESCE(error_detail, '')), :needle) > 0
       OR instr(lower(payload), :needle) > 0)
ORDER BY id DESC
LIMIT :limit;

-- name: snoozed_jobs
-- The snoozed view (docs/dashboard.md, "/jobs"): queued jobs whose latest attempt ended
-- snoozed, newest first, among the newest :scan snoozed attempts of jobs in :floor_id <= id <
-- :before_id (a range of job_attempts_snoozed, newest job and attempt first: the caller
-- bounds it), with the exact filters. Each attempt in that window costs one primary-key look
-- at its job; a job's latest snoozed attempt comes first of its own, so a window cut inside
-- one job's attempts still holds the one that counts.
SELECT j.* FROM (
    SELECT a.job_id, a.attempt FROM job_attempts AS a
    WHERE a.status = 'snoozed' AND a.job_id < :before_id AND a.job_id >= :floor_id
    ORDER BY a.job_id DESC, a.attempt DESC
    LIMIT :scan
) AS w JOIN jobs AS j ON j.id = w.job_id AND j.attempts = w.attempt
WHERE j.status = 'queued'
  AND (:type IS NULL OR j.type = :type)
  AND (:queue IS NULL OR j.queue = :queue)
  AND (:error_code IS NULL OR j.error_code = :error_code)
ORDER BY j.id DESC
LIMIT :limit;

-- name: snoozed_window
-- The window snoozed_jobs looked at: how many snoozed attempts, and the lowest job id among
-- them (where the next page starts when this one found too few).
SELECT COUNT(*) AS n, MIN(job_id) AS floor FROM (
    SELECT a.job_id FROM job_attempts AS a
    WHERE a.status = 'snoozed' AND a.job_id < :before_id AND a.job_id >= :floor_id
    ORDER BY a.job_id DESC, a.attempt DESC
    LIMIT :scan
) AS w;

-- name: job_attempts
-- A job's attempts in order.
SELECT * FROM job_attempts WHERE job_id = :job_id ORDER BY attempt;

-- name: job_events
-- A job's events in order: its whole history.
SELECT * FROM job_events WHERE job_id = :job_id ORDER BY id;

-- name: upsert_worker
-- Register (or re-register) a worker.
INSERT INTO workers (id, hostname, pid, queues, types, schedules, concurrency, started_at,
                     last_seen_at)
VALUES (:id, :hostname, :pid, :queues, :types, :schedules, :concurrency, :now, :now)
ON CONFLICT (id) DO UPDATE SET last_seen_at = excluded.last_seen_at, stopped_at = NULL,
    queues = excluded.queues, types = excluded.types, schedules = excluded.schedules;

-- name: worker_seen
-- A worker is alive.
UPDATE workers SET last_seen_at = :now, counters = COALESCE(:counters, counters) WHERE id = :id;

-- name: worker_stopped
-- A worker stopped cleanly.
UPDATE workers SET stopped_at = :now, last_seen_at = :now, counters = COALESCE(:counters, counters)
WHERE id = :id;

-- name: worker_counters
-- Every worker's running totals (JSON), stopped workers included, for counters in /metrics.
SELECT counters FROM workers WHERE counters IS NOT NULL;

-- name: count_batch_jobs
-- A write that may have moved jobs into a final state counts them into job_counts, in its own
-- transaction (no triggers since migration_0004.sql; figures.py): :job_ids, a JSON array,
-- holds every job it wrote (a worker's batch: every job whose attempt it ended); those now in
-- a final state count one each, grouped. The rows are read by primary key only (never
-- through a status index).
WITH batch AS MATERIALIZED (
    SELECT status, queue, type, finished_at FROM jobs
    WHERE id IN (SELECT value FROM json_each(:job_ids))
)
INSERT INTO job_counts (status, queue, type, shard, n)
SELECT status, queue, type, 0, COUNT(*) FROM batch
WHERE status IN ('succeeded', 'failed', 'cancelled') AND finished_at IS NOT NULL
GROUP BY status, queue, type
ON CONFLICT (status, queue, type, shard) DO UPDATE SET n = n + excluded.n;

-- name: count_batch_minutes
-- The same jobs into job_stats_minutely, one grouped upsert: outcomes by attempts used and
-- wait of the jobs now final, and — when :with_runs (the write closed the attempt a job's
-- attempts column names: a worker's outcome, complete_in; not a cancel of a queued job, whose
-- last attempt closed long before and was counted then) — run time of those attempts closed
-- with an outcome. The rows are read once, by primary key; MAX(NULL, 0.0) is NULL, so a job
-- that never started has no wait.
WITH batch AS MATERIALIZED (
    SELECT j.status, j.queue, j.attempts, CAST(j.finished_at / 60 AS INTEGER) * 60.0 AS minute,
           MAX(j.started_at - j.run_at, 0.0) AS w, a.status AS attempt_status,
           CAST(a.finished_at / 60 AS INTEGER) * 60.0 AS attempt_minute,
           MAX(a.finished_at - a.started_at, 0.0) AS r
    FROM jobs AS j LEFT JOIN job_attempts AS a ON a.job_id = j.id AND a.attempt = j.attempts
    WHERE j.id IN (SELECT value FROM json_each(:job_ids))
)
INSERT INTO job_stats_minutely (measure, minute, queue, bucket, shard, count, total, maximum)
SELECT measure, minute, queue, bucket, 0, COUNT(*), SUM(v), MAX(v) FROM (
    SELECT status AS measure, minute, queue, attempts AS bucket, 0.0 AS v FROM batch
    WHERE status IN ('succeeded', 'failed', 'cancelled') AND minute IS NOT NULL
    UNION ALL
    SELECT 'wait', minute, queue, (SELECT COUNT(*) FROM job_stats_bounds WHERE upper < w), w
    FROM batch
    WHERE status IN ('succeeded', 'failed', 'cancelled') AND minute IS NOT NULL AND w IS NOT NULL
    UNION ALL
    SELECT 'run', attempt_minute, queue,
           (SELECT COUNT(*) FROM job_stats_bounds WHERE upper < r), r
    FROM batch
    WHERE :with_runs AND attempt_status IN ('succeeded', 'failed', 'cancelled') AND attempt_minute IS NOT NULL
)
GROUP BY measure, minute, queue, bucket
ON CONFLICT (measure, minute, queue, bucket, shard) DO UPDATE SET
    count = count + excluded.count, total = total + excluded.total,
    maximum = MAX(maximum, excluded.maximum);

-- name: count_batch_errors
-- The same jobs that reached a final state with an error code into job_errors_minutely.
-- :job_ids: only the outcomes that are not successes (a success clears the error code), so
-- a worker's batch of successes skips this.
WITH batch AS MATERIALIZED (
    SELECT status, type, error_code, finished_at FROM jobs
    WHERE id IN (SELECT value FROM json_each(:job_ids))
)
INSERT INTO job_errors_minutely (minute, error_code, type, shard, count, last_finished_at)
SELECT CAST(finished_at / 60 AS INTEGER) * 60.0 AS minute, error_code, type, 0, COUNT(*),
       MAX(finished_at)
FROM batch
WHERE status IN ('succeeded', 'failed', 'cancelled') AND finished_at IS NOT NULL
  AND error_code IS NOT NULL
GROUP BY minute, error_code, type
ON CONFLICT (minute, error_code, type, shard) DO UPDATE SET
    count = count + excluded.count,
    last_finished_at = MAX(last_finished_at, excluded.last_finished_at);

-- name: count_grouped_jobs
-- The worker's batch counts into job_counts what count_batch_jobs would read back from the
-- rows, grouped in Python from the outcomes and the claimed jobs (figures.py: count_held):
-- :rows is a JSON array of [status, queue, type, n], each key once. (A WHERE, always true:
-- without one the parser would read ON CONFLICT as a join's ON. Its :now picks PostgreSQL's
-- shard of the minute there; SQLite keeps no row versions and writes shard 0.)
INSERT INTO job_counts (status, queue, type, shard, n)
SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]'), 0,
       json_extract(value, '$[3]')
FROM json_each(:rows) WHERE :now IS NOT NULL
ON CONFLICT (status, queue, type, shard) DO UPDATE SET n = n + excluded.n;

-- name: count_grouped_minutes
-- The same batch into job_stats_minutely (count_batch_minutes' figures): :rows is a JSON
-- array of [measure, queue, bucket, count, total, maximum], each key once, all in the minute
-- of :now (the batch's finished_at), cut as count_batch_minutes cuts it.
INSERT INTO job_stats_minutely (measure, minute, queue, bucket, shard, count, total, maximum)
SELECT json_extract(value, '$[0]'), CAST(:now / 60 AS INTEGER) * 60.0,
       json_extract(value, '$[1]'), json_extract(value, '$[2]'), 0, json_extract(value, '$[3]'),
       json_extract(value, '$[4]'), json_extract(value, '$[5]')
FROM json_each(:rows) WHERE true
ON CONFLICT (measure, minute, queue, bucket, shard) DO UPDATE SET
    count = count + excluded.count, total = total + excluded.total,
    maximum = MAX(maximum, excluded.maximum);

-- name: count_grouped_errors
-- The same batch into job_errors_minutely (count_batch_errors' figures): :rows is a JSON
-- array of [error_code, type, count], each key once, all finished at :now.
INSERT INTO job_errors_minutely (minute, error_code, type, shard, count, last_finished_at)
SELECT CAST(:now / 60 AS INTEGER) * 60.0, json_extract(value, '$[0]'),
       json_extract(value, '$[1]'), 0, json_extract(value, '$[2]'), :now
FROM json_each(:rows) WHERE true
ON CONFLICT (minute, error_code, type, shard) DO UPDATE SET
    count = count + excluded.count,
    last_finished_at = MAX(last_finished_at, excluded.last_finished_at);

-- name: uncount_jobs
-- The opposite of count_batch_jobs, run *before* a write takes jobs out of their final state
-- (a manual retry) or deletes them (prune): those of :job_ids (a JSON array) still final
-- count one fewer each, grouped. Read by primary key (the unary + keeps the status index
-- out). The minute figures keep what happened: an outcome stays an outcome of its minute.
UPDATE job_counts SET n = job_counts.n - g.gone
FROM (SELECT status, queue, type, COUNT(*) AS gone FROM jobs
      WHERE id IN (SELECT value FROM json_each(:job_ids))
        AND +status IN ('succeeded', 'failed', 'cancelled')
      GROUP BY status, queue, type) AS g
WHERE job_counts.status = g.status AND job_counts.queue = g.queue
  AND job_counts.type = g.type AND job_counts.shard = 0;

-- name: uncount_job_errors
-- The opposite of count_batch_errors, run with uncount_jobs: job_errors_minutely equals a
-- count of the rows, so a job leaving its final state or deleted is taken off.
UPDATE job_errors_minutely SET count = job_errors_minutely.count - g.gone
FROM (SELECT CAST(finished_at / 60 AS INTEGER) * 60.0 AS minute, error_code, type,
             COUNT(*) AS gone
      FROM jobs
      WHERE id IN (SELECT value FROM json_each(:job_ids))
        AND +status IN ('succeeded', 'failed', 'cancelled') AND +finished_at IS NOT NULL
        AND +error_code IS NOT NULL
      GROUP BY minute, error_code, type) AS g
WHERE job_errors_minutely.minute = g.minute AND job_errors_minutely.error_code = g.error_code
  AND job_errors_minutely.type = g.type AND job_errors_minutely.shard = 0;
