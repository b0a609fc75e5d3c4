-- Named queries for the PostgreSQL backend: the same names, parameters and RETURNING/SELECT
-- column orders as sql/sqlite/jobs.sql (tests/backends/test_sql_names.py checks the names) —
-- but claim, which this dialect never runs: own.sql's claim_recorded stands in for it
-- (sql.REPLACED).
-- Parameters are :named (rewritten to psycopg's %(name)s at load). Times are bound as float
-- unix seconds, like on SQLite, and converted here with to_timestamp(), so the shared verbs
-- never know which dialect they speak to. A parameter whose type PostgreSQL cannot infer from
-- its context (NULL tests, lists) carries an explicit CAST.

-- name: insert_job
-- Insert one job, its limit key and group with it (NULL: no limit); a unique_key already held
-- by an active job, or by a job that succeeded within its unique_for, inserts nothing.
INSERT INTO jobs (queue, type, payload, status, priority, max_attempts, run_at, created_at, unique_key,
                  headers, limit_key, limit_group, unique_for, expires_in, expires_at,
                  deadline_at)
SELECT :queue, :type, CAST(:payload AS jsonb), :to_state, :priority, :max_attempts,
       to_timestamp(:run_at), to_timestamp(:now), CAST(:unique_key AS text), CAST(:headers AS jsonb),
       CAST(:limit_key AS text), CAST(:limit_group AS text), CAST(:unique_for AS double precision),
       CAST(:expires_in AS double precision),
       to_timestamp(CAST(:expires_at AS double precision)),
       to_timestamp(CAST(:deadline_at AS double precision))
WHERE NOT EXISTS (SELECT 1 FROM jobs AS h
                  WHERE h.unique_key = CAST(:unique_key AS text)
                    AND h.status = 'succeeded' AND h.unique_for IS NOT NULL
                    AND h.finished_at + make_interval(secs => h.unique_for) > to_timestamp(:now))
ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND status IN ('queued', 'running')
DO NOTHING
RETURNING id;

-- name: insert_jobs
-- Insert many jobs without unique keys in one statement; :batch is a JSON array of
-- [queue, type, payload_text, priority, max_attempts, run_at, limit_key, limit_group]. Rows go
-- in in array order, so the returned ids, sorted, are the jobs' ids in that order (the
-- identity only grows).
INSERT INTO jobs (queue, type, payload, status, priority, max_attempts, run_at, created_at,
                  limit_key, limit_group)
SELECT e->>0, e->>1, CAST(e->>2 AS jsonb), :to_state, (e->>3)::integer, (e->>4)::integer,
       to_timestamp((e->>5)::double precision), to_timestamp(:now), e->>6, e->>7
FROM jsonb_array_elements(CAST(:batch AS jsonb)) WITH ORDINALITY AS t(e, n) ORDER BY n
RETURNING id;

-- name: insert_jobs_alike
-- Insert many jobs that differ only in payload (enqueue_many's common case: one type, its
-- defaults, due now) in one statement; :payloads is a JSON array of payload texts, the rest
-- are bound once. Cheaper than insert_jobs by the five fields it does not extract per row.
-- Rows go in in array order, so the returned ids, sorted, are the jobs' ids in that order.
INSERT INTO jobs (queue, type, payload, status, priority, max_attempts, run_at, created_at,
                  limit_key, limit_group)
SELECT :queue, :type, CAST(p AS jsonb), :to_state, :priority, :max_attempts,
       to_timestamp(:run_at), to_timestamp(:now), :limit_key, :limit_group
FROM jsonb_array_elements_text(CAST(:payloads AS jsonb)) WITH ORDINALITY AS t(p, n) ORDER BY n
RETURNING id;

-- name: insert_jobs_alike_counted
-- insert_jobs_alike without RETURNING, for a dialect whose driver reports the statement's last
-- id and row count (SQLite; SQLJobs.counted_inserts). Kept here for parity: PostgreSQL
-- writes large batches by COPY with ids drawn first, and small ones with insert_jobs_alike.
INSERT INTO jobs (queue, type, payload, status, priority, max_attempts, run_at, created_at,
                  limit_key, limit_group)
SELECT :queue, :type, CAST(p AS jsonb), :to_state, :priority, :max_attempts,
       to_timestamp(:run_at), to_timestamp(:now), :limit_key, :limit_group
FROM jsonb_array_elements_text(CAST(:payloads AS jsonb)) WITH ORDINALITY AS t(p, n) ORDER BY n;

-- name: insert_enqueued_events_range
-- The ENQUEUED audit event of each job whose id is in [:first, :last] (jobs just written as
-- one consecutive range).
INSERT INTO job_events (job_id, ts, event, actor, detail)
SELECT id, to_timestamp(:now), :event, :actor, NULL FROM jobs WHERE id BETWEEN :first AND :last;

-- name: insert_enqueued_events
-- The ENQUEUED audit event of each of many new jobs (:job_ids is a JSON array).
INSERT INTO job_events (job_id, ts, event, actor, detail)
SELECT e::bigint, to_timestamp(:now), :event, :actor, NULL
FROM jsonb_array_elements_text(CAST(:job_ids AS jsonb)) AS e;

-- name: active_job_by_unique_key
-- The job holding a unique key: the active one, else one that succeeded within its unique_for.
SELECT id FROM (
    SELECT id, 0 AS rank FROM jobs WHERE unique_key = :unique_key AND status IN ('queued', 'running')
    UNION ALL
    SELECT id, 1 AS rank FROM jobs
    WHERE unique_key = :unique_key AND status = 'succeeded' AND unique_for IS NOT NULL
      AND finished_at + make_interval(secs => unique_for) > to_timestamp(:now)
) AS holders
ORDER BY rank, id DESC LIMIT 1;

-- name: insert_event
-- Append one audit event.
INSERT INTO job_events (job_id, ts, event, actor, detail)
VALUES (:job_id, to_timestamp(:ts), :event, :actor, :detail);

-- name: claim_behind
-- The first job the claim would take at priority :after_priority, from the front of jobs_due
-- up to the claimer's position (:after_run_at, :after_id), or none: a probe run on a thread
-- of its own every few seconds (backends/claim_position.py), so that a job come due behind
-- the position (a run_at in the past, a resumed queue) is claimed though the claim resumes
-- past it. It reads the dead entries a held snapshot keeps there; the claim does not.
SELECT run_at, id FROM jobs
WHERE {{due_job}}
  AND limit_key IS NULL
  AND priority = CAST(:after_priority AS bigint)
  AND (run_at, id) <= (to_timestamp(:after_run_at), CAST(:after_id AS bigint))
ORDER BY priority DESC, run_at, id
LIMIT 1;

-- name: open_attempts
-- Open the attempt rows of just-claimed jobs (:job_ids is a JSON array; read into an array,
-- so the rows are found through the primary key whatever the statistics say: see claim_ids).
INSERT INTO job_attempts (job_id, attempt, worker_id, started_at, status)
SELECT id, attempts, worker_id, to_timestamp(:now), :status FROM jobs
WHERE id = ANY(ARRAY(SELECT value::bigint FROM jsonb_array_elements_text(CAST(:job_ids AS jsonb))));

-- name: insert_events
-- Append many audit events: :rows is a JSON array of [job_id, ts, event, actor, detail].
INSERT INTO job_events (job_id, ts, event, actor, detail)
SELECT (e->>0)::bigint, to_timestamp((e->>1)::double precision), e->>2, e->>3,
       CAST(e->>4 AS jsonb)
FROM jsonb_array_elements(CAST(:rows AS jsonb)) AS e;

-- name: succeed_jobs
-- Fenced, batched: record success of many held attempts; returns (id, attempt) applied.
-- :batch is a JSON array of [job_id, attempt, started_at, result_json_text_or_null].
-- status || '' keeps the planner from driving the join by a status index (whose statistics
-- may say "a few rows" when there are thousands): each batch row must be one primary-key
-- lookup, as SQLite's unary + does in its file.
UPDATE jobs
SET status = :to_state, started_at = to_timestamp(b.started_at),
    finished_at = to_timestamp(:now), result = CAST(b.result AS jsonb),
    lease_expires_at = NULL, error_code = NULL, error_detail = NULL
FROM (SELECT (e->>0)::bigint AS id, (e->>1)::integer AS attempt,
             (e->>2)::double precision AS started_at, e->>3 AS result
      FROM jsonb_array_elements(CAST(:batch AS jsonb)) AS e) AS b
WHERE jobs.id = b.id AND jobs.attempts = b.attempt AND jobs.status || '' = :from_state
RETURNING jobs.id, jobs.attempts;

-- name: insert_claimed_events
-- The CLAIMED audit event of each just-claimed job (:job_ids is a JSON array), its attempt
-- number read from the row rather than shipped in as JSON (the ids found as open_attempts
-- finds them).
INSERT INTO job_events (job_id, ts, event, actor, detail)
SELECT id, to_timestamp(:now), :event, worker_id, jsonb_build_object('attempt', attempts)
FROM jobs
WHERE id = ANY(ARRAY(SELECT value::bigint FROM jsonb_array_elements_text(CAST(:job_ids AS jsonb))));

-- name: close_succeeded_attempts
-- Close the attempt rows of applied successes; :batch is succeed_jobs' own batch.
UPDATE job_attempts
SET status = :status, started_at = to_timestamp(b.started_at), finished_at = to_timestamp(:now),
    error_code = NULL, error_detail = NULL, traceback_ref = NULL
FROM (SELECT (e->>0)::bigint AS job_id, (e->>1)::integer AS attempt,
             (e->>2)::double precision AS started_at
      FROM jsonb_array_elements(CAST(:batch AS jsonb)) AS e) AS b
WHERE job_attempts.job_id = b.job_id AND job_attempts.attempt = b.attempt;

-- name: insert_succeeded_events
-- The SUCCEEDED audit event of each applied success; :batch is succeed_jobs' own batch.
INSERT INTO job_events (job_id, ts, event, actor, detail)
SELECT (e->>0)::bigint, to_timestamp(:now), :event, :actor,
       jsonb_build_object('attempt', (e->>1)::integer)
FROM jsonb_array_elements(CAST(:batch AS jsonb)) AS e;

-- name: fail_job
-- Fenced: final failure (attempts exhausted or not retryable).
UPDATE jobs
SET status = :to_state, started_at = to_timestamp(:started_at), finished_at = to_timestamp(:now),
    lease_expires_at = NULL, error_code = :error_code, error_detail = :error_detail
WHERE id = :job_id AND attempts = :attempt AND status = :from_state;

-- name: schedule_retry
-- Fenced: failed attempt with attempts left goes back to queued at a later run_at.
UPDATE jobs
SET status = :to_state, started_at = to_timestamp(:started_at), run_at = to_timestamp(:retry_at),
    lease_expires_at = NULL, error_code = :error_code, error_detail = :error_detail
WHERE id = :job_id AND attempts = :attempt AND status = :from_state;

-- name: cancel_running_job
-- Fenced: a running job that saw its cancel request ends cancelled.
UPDATE jobs
SET status = :to_state, started_at = to_timestamp(:started_at), finished_at = to_timestamp(:now),
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
SET status = b.status, started_at = to_timestamp(b.started_at), finished_at = to_timestamp(:now),
    error_code = b.error_code, error_detail = b.error_detail, traceback_ref = b.traceback_ref
FROM (SELECT (e->>0)::bigint AS job_id, (e->>1)::integer AS attempt, e->>2 AS status,
             (e->>3)::double precision AS started_at, e->>4 AS error_code,
             e->>5 AS error_detail, e->>6 AS traceback_ref
      FROM jsonb_array_elements(CAST(:batch AS jsonb)) AS e) AS b
WHERE job_attempts.job_id = b.job_id AND job_attempts.attempt = b.attempt;

-- name: lose_attempt
-- Close an attempt whose lease expired (its worker is gone or stalled).
UPDATE job_attempts
SET status = :status, finished_at = to_timestamp(:now), error_code = :error_code,
    error_detail = :error_detail
WHERE job_id = :job_id AND attempt = :attempt;

-- name: insert_blob
-- Store a large text (a full traceback) outside the jobs row.
INSERT INTO job_blobs (job_id, kind, body, created_at)
VALUES (:job_id, :kind, :body, to_timestamp(:now))
RETURNING id;

-- name: get_blob
-- Read a stored blob by id.
SELECT body FROM job_blobs WHERE id = :id;

-- name: heartbeat
-- Fenced: extend the lease of a job this worker still holds.
UPDATE jobs
SET heartbeat_at = to_timestamp(:now), lease_expires_at = to_timestamp(:now + :lease_seconds)
WHERE id = :job_id AND attempts = :attempt AND status = :from_state AND worker_id = :worker_id;

-- name: expired_leases
-- Running jobs whose lease has expired, oldest first. SKIP LOCKED: two rescuers never wait on
-- (or double-recover) the same row; the fenced recover_job below is the real guard.
-- The scan of jobs_running starts at :after (backends/lease_sweep.py: where the last sweep
-- saw every lease expired), past the entries finished jobs leave there until VACUUM; 0 reads
-- it from the front.
SELECT id, attempts, max_attempts, worker_id FROM jobs
WHERE status = 'running' AND lease_expires_at < to_timestamp(:now)
  AND lease_expires_at >= to_timestamp(:after)
ORDER BY lease_expires_at LIMIT :limit
FOR UPDATE SKIP LOCKED;

-- name: expired_leases_seen
-- How many running jobs in the sweep's range have an expired lease, locked rows included:
-- more than expired_leases returned means it skipped a locked row (whose holder may roll
-- back), so the sweep's position must not pass it.
SELECT COUNT(*) AS n FROM jobs
WHERE status = 'running' AND lease_expires_at < to_timestamp(:now)
  AND lease_expires_at >= to_timestamp(:after);

-- name: expired_lease_behind
-- The first expired lease before :after, where the rescuer's sweep starts (or none): a probe
-- run on a thread of its own every 30 s or more (backends/lease_sweep.py), so a lease written
-- behind the sweep's position (a host whose clock runs behind) is still recovered. It reads
-- the entries finished jobs leave in jobs_running until VACUUM; the sweep does not.
SELECT lease_expires_at FROM jobs
WHERE status = 'running' AND lease_expires_at < to_timestamp(:now)
  AND lease_expires_at < to_timestamp(:after)
ORDER BY lease_expires_at LIMIT 1;

-- name: recover_job
-- Fenced: a lost attempt goes back to queued (attempts left) or to failed (exhausted).
UPDATE jobs
SET status = :to_state,
    run_at = CASE WHEN :to_state = 'queued' THEN to_timestamp(:now) ELSE run_at END,
    finished_at = CASE WHEN :to_state = 'queued' THEN NULL ELSE to_timestamp(:now) END,
    lease_expires_at = NULL, error_code = :error_code, error_detail = :error_detail
WHERE id = :job_id AND attempts = :attempt AND status = :from_state;

-- name: retry_outcome
-- The finished outcome a manual retry is about to clear, for the hourly rollup (the same
-- columns, in the same order, as prune_batch returns).
SELECT queue, type, status, run_at, started_at, finished_at FROM jobs
WHERE id = :job_id AND status = ANY(CAST(:from_states AS text[]))
FOR UPDATE;

-- name: retry_job
-- Manual retry of a failed or cancelled job; it gets at least one more attempt, and no
-- start-by time nor deadline (an operator's retry lifts expires_in and deadline).
UPDATE jobs
SET status = :to_state, run_at = to_timestamp(:now), finished_at = NULL, lease_expires_at = NULL,
    cancel_requested = 0, max_attempts = GREATEST(max_attempts, attempts + 1), expires_at = NULL,
    deadline_at = NULL
WHERE id = :job_id AND status = ANY(CAST(:from_states AS text[]))
RETURNING id;

-- name: cancel_queued_job
-- Cancel a job that has not started.
UPDATE jobs
SET status = :to_state, finished_at = to_timestamp(:now), error_code = :error_code,
    error_detail = :error_detail
WHERE id = :job_id AND status = :from_state
RETURNING id;

-- name: request_cancel
-- Ask the worker holding a running job to stop it.
UPDATE jobs SET cancel_requested = 1 WHERE id = :job_id AND status = 'running'
RETURNING id;

-- name: cancel_requested
-- Which of these held jobs have a cancel request.
-- (status = 'running') IS TRUE: a test no partial index's predicate matches, so this is one
-- primary-key lookup per id, never a walk of jobs_running (whose statistics may say "a few
-- rows", and which holds every finished job's entry until VACUUM).
SELECT id FROM jobs
WHERE id = ANY(CAST(:job_ids AS bigint[])) AND cancel_requested = 1
  AND (status = 'running') IS TRUE;

-- name: next_due
-- When the next queued job this worker could run falls due (a paused queue has none), of those
-- due after :after (the index scan of jobs_queued_run_at starts there).
SELECT MIN(run_at) AS next_run_at FROM jobs
WHERE status = 'queued' AND run_at > to_timestamp(:after)
  AND type = ANY(CAST(:types AS text[]))
  AND (CAST(:queues AS text[]) IS NULL OR queue = ANY(CAST(:queues AS text[])))
  AND queue NOT IN (SELECT queue FROM queue_pauses)
  AND NOT EXISTS (SELECT 1 FROM queue_pauses WHERE queue = '*');

-- name: get_job
-- One job by id.
SELECT * FROM jobs WHERE id = :id;

-- name: list_jobs
-- Jobs matching optional filters, newest first, keyset-paginated by id.
SELECT * FROM jobs
WHERE (CAST(:status AS text) IS NULL OR status = :status)
  AND (CAST(:type AS text) IS NULL OR type = :type)
  AND (CAST(:queue AS text) IS NULL OR queue = :queue)
  AND (CAST(:error_code AS text) IS NULL OR error_code = :error_code)
  AND (CAST(:before_id AS bigint) IS NULL OR id < :before_id)
ORDER BY id DESC
LIMIT :limit;

-- name: newest_job_id
-- The highest job id (the top of a bounded search's first window).
SELECT MAX(id) AS id FROM jobs;

-- name: search_jobs
-- Text search over one window of ids (:floor_id <= id < :before_id, a range of the primary
-- key: the caller bounds it), with the exact filters: type, queue or error code starting with
-- :prefix (a LIKE pattern, lower case, escaped), or :needle (lower case) in the error message
-- or the payload's JSON text.
SELECT * FROM jobs
WHERE id < :before_id AND id >= :floor_id
  AND (CAST(:status AS text) IS NULL OR status = :status)
  AND (CAST(:type AS text) IS NULL OR type = :type)
  AND (CAST(:queue AS text) IS NULL OR queue = :queue)
  AND (CAST(:error_code AS text) IS NULL OR error_code = :error_code)
  AND (lower(type) LIKE :prefix ESCAPE '\' OR lower(queue) LIKE :prefix ESCAPE '\'
       OR lower(COALESCE(error_code, '')) LIKE :prefix ESCAPE '\'
       OR strpos(lower(COALESCE(error_detail, '')), :needle) > 0
       OR strpos(lower(CAST(payload AS text)), :needle) > 0)
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
  AND (CAST(:type AS text) IS NULL OR j.type = :type)
  AND (CAST(:queue AS text) IS NULL OR j.queue = :queue)
  AND (CAST(:error_code AS text) IS NULL OR j.error_code = :error_code)
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
VALUES (:id, :hostname, :pid, :queues, :types, :schedules, :concurrency, to_timestamp(:now),
        to_timestamp(:now))
ON CONFLICT (id) DO UPDATE SET last_seen_at = excluded.last_seen_at, stopped_at = NULL,
    queues = excluded.queues, types = excluded.types, schedules = excluded.schedules;

-- name: worker_seen
-- A worker is alive.
UPDATE workers SET last_seen_at = to_timestamp(:now),
    counters = COALESCE(CAST(:counters AS text), counters)
WHERE id = :id;

-- name: worker_stopped
-- A worker stopped cleanly.
UPDATE workers SET stopped_at = to_timestamp(:now), last_seen_at = to_timestamp(:now),
    counters = COALESCE(CAST(:counters AS text), counters)
WHERE id = :id;

-- name: worker_counters
-- Every worker's running totals (JSON), stopped workers included, for counters in /metrics.
SELECT counters FROM workers WHERE counters IS NOT NULL;

-- name: count_batch_jobs
-- A write that may have moved jobs into a final state counts them into job_counts, in its own
-- transaction (no triggers since migration_0004.sql; figures.py): :job_ids, a JSON array,
-- holds every job it wrote (a worker's batch: every job whose attempt it ended); those now in
-- a final state count one each, into this backend's shard, in key order. The rows are read by
-- primary key only (never through a status index, which the planner picks with stale
-- statistics).
WITH batch AS MATERIALIZED (
    SELECT j.status, j.queue, j.type, j.finished_at
    FROM jsonb_array_elements_text(CAST(:job_ids AS jsonb)) AS i (id)
    -- LATERAL … LIMIT 1: one primary-key lookup per id whatever the statistics say
    -- (every path but the worker's runs without its planner settings).
    CROSS JOIN LATERAL (
        SELECT status, queue, type, finished_at FROM jobs WHERE id = i.id::bigint LIMIT 1
    ) AS j
)
INSERT INTO job_counts AS c (status, queue, type, shard, n)
SELECT status, queue, type, pg_backend_pid(), COUNT(*) FROM batch
WHERE status IN ('succeeded', 'failed', 'cancelled') AND finished_at IS NOT NULL
GROUP BY status, queue, type ORDER BY status, queue, type
ON CONFLICT (status, queue, type, shard) DO UPDATE SET n = c.n + EXCLUDED.n;

-- name: count_batch_minutes
-- The same jobs into job_stats_minutely, one grouped upsert: outcomes by attempts used and
-- wait of the jobs now final, and — when :with_runs (the write closed the attempt a job's
-- attempts column names: a worker's outcome, complete_in; not a cancel of a queued job) —
-- run time of those attempts closed with an outcome. Read once, by primary key. The
-- bucket is errands_bucket's own subquery, written out: a call of that SQL function per value
-- cost ~3x as much (measured).
WITH batch AS MATERIALIZED (
    SELECT j.status, j.queue, j.attempts, j.finished_at, j.started_at,
           GREATEST(EXTRACT(EPOCH FROM j.started_at) - EXTRACT(EPOCH FROM j.run_at),
                    0)::float8 AS w,
           a.status AS attempt_status, a.finished_at AS attempt_finished_at,
           GREATEST(EXTRACT(EPOCH FROM a.finished_at) - EXTRACT(EPOCH FROM a.started_at),
                    0)::float8 AS r
    FROM jsonb_array_elements_text(CAST(:job_ids AS jsonb)) AS i (id)
    -- LATERAL … LIMIT 1: one primary-key lookup per id whatever the statistics say (every
    -- path but the worker's runs without its planner settings).
    CROSS JOIN LATERAL (
        SELECT id, status, queue, attempts, run_at, started_at, finished_at FROM jobs
        WHERE id = i.id::bigint LIMIT 1
    ) AS j
    LEFT JOIN LATERAL (
        SELECT status, started_at, finished_at FROM job_attempts
        WHERE job_id = j.id AND attempt = j.attempts LIMIT 1
    ) AS a ON true
)
INSERT INTO job_stats_minutely AS m (measure, minute, queue, bucket, shard, count, total, maximum)
SELECT measure, minute, queue, bucket, pg_backend_pid(), COUNT(*), SUM(v), MAX(v)
FROM (
    SELECT status AS measure, errands_minute(finished_at) AS minute, queue,
           attempts AS bucket, 0::float8 AS v
    FROM batch
    WHERE status IN ('succeeded', 'failed', 'cancelled') AND finished_at IS NOT NULL
    UNION ALL
    SELECT 'wait', errands_minute(finished_at), queue,
           (SELECT COUNT(*)::integer FROM job_stats_bounds WHERE upper < w), w
    FROM batch
    WHERE status IN ('succeeded', 'failed', 'cancelled') AND finished_at IS NOT NULL
      AND started_at IS NOT NULL
    UNION ALL
    SELECT 'run', errands_minute(attempt_finished_at), queue,
           (SELECT COUNT(*)::integer FROM job_stats_bounds WHERE upper < r), r
    FROM batch
    WHERE CAST(:with_runs AS boolean) AND attempt_status IN ('succeeded', 'failed', 'cancelled')
      AND attempt_finished_at IS NOT NULL
) AS f
GROUP BY measure, minute, queue, bucket ORDER BY measure, minute, queue, bucket
ON CONFLICT (measure, minute, queue, bucket, shard) DO UPDATE SET
    count = m.count + EXCLUDED.count, total = m.total + EXCLUDED.total,
    maximum = GREATEST(m.maximum, EXCLUDED.maximum);

-- name: count_batch_errors
-- The same jobs that reached a final state with an error code into job_errors_minutely,
-- into this backend's shard, in key order. :job_ids: only the outcomes that are not
-- successes (a success clears the error code).
WITH batch AS MATERIALIZED (
    SELECT j.status, j.type, j.error_code, j.finished_at
    FROM jsonb_array_elements_text(CAST(:job_ids AS jsonb)) AS i (id)
    -- LATERAL … LIMIT 1: one primary-key lookup per id whatever the statistics say
    -- (every path but the worker's runs without its planner settings).
    CROSS JOIN LATERAL (
        SELECT status, type, error_code, finished_at FROM jobs WHERE id = i.id::bigint LIMIT 1
    ) AS j
)
INSERT INTO job_errors_minutely AS e (minute, error_code, type, shard, count, last_finished_at)
SELECT errands_minute(finished_at), error_code, type, pg_backend_pid(), COUNT(*),
       MAX(finished_at)
FROM batch
WHERE status IN ('succeeded', 'failed', 'cancelled') AND finished_at IS NOT NULL
  AND error_code IS NOT NULL
GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
ON CONFLICT (minute, error_code, type, shard) DO UPDATE SET
    count = e.count + EXCLUDED.count,
    last_finished_at = GREATEST(e.last_finished_at, EXCLUDED.last_finished_at);

-- name: count_grouped_jobs
-- The worker's batch counts into job_counts what count_batch_jobs would read back from the
-- rows, grouped in Python from the outcomes and the claimed jobs (figures.py: count_held):
-- :rows is a JSON array of [status, queue, type, n], each key once; into this backend's
-- shard of the minute of :now (pid * 64 + minute mod 64), in key order. The shard moves on
-- every minute because each upsert leaves a version of its row, which a held snapshot keeps
-- (VACUUM cannot remove it), and the next upsert of the same key walks every version: with
-- one row per backend for good, its cost grew with the whole hold (20,000 upserts: 150
-- buffers each); with a row per minute, with one minute of batches. Readers sum the shards
-- and prune folds them into shard 0 as before.
INSERT INTO job_counts AS c (status, queue, type, shard, n)
SELECT e->>0, e->>1, e->>2,
       pg_backend_pid() * 64 + CAST(floor(CAST(:now AS float8) / 60) AS bigint) % 64,
       (e->>3)::bigint
FROM jsonb_array_elements(CAST(:rows AS jsonb)) AS e
ORDER BY 1, 2, 3
ON CONFLICT (status, queue, type, shard) DO UPDATE SET n = c.n + EXCLUDED.n;

-- name: count_grouped_minutes
-- The same batch into job_stats_minutely (count_batch_minutes' figures): :rows is a JSON
-- array of [measure, queue, bucket, count, total, maximum], each key once, all in the minute
-- of :now (the batch's finished_at, stored as to_timestamp(:now)); in key order.
INSERT INTO job_stats_minutely AS m (measure, minute, queue, bucket, shard, count, total, maximum)
SELECT e->>0, errands_minute(to_timestamp(:now)), e->>1, (e->>2)::integer, pg_backend_pid(),
       (e->>3)::bigint, (e->>4)::float8, (e->>5)::float8
FROM jsonb_array_elements(CAST(:rows AS jsonb)) AS e
ORDER BY 1, 3, 4
ON CONFLICT (measure, minute, queue, bucket, shard) DO UPDATE SET
    count = m.count + EXCLUDED.count, total = m.total + EXCLUDED.total,
    maximum = GREATEST(m.maximum, EXCLUDED.maximum);

-- name: count_grouped_errors
-- The same batch into job_errors_minutely (count_batch_errors' figures): :rows is a JSON
-- array of [error_code, type, count], each key once, all finished at :now; in key order.
INSERT INTO job_errors_minutely AS e (minute, error_code, type, shard, count, last_finished_at)
SELECT errands_minute(to_timestamp(:now)), r->>0, r->>1, pg_backend_pid(), (r->>2)::bigint,
       to_timestamp(:now)
FROM jsonb_array_elements(CAST(:rows AS jsonb)) AS r
ORDER BY 2, 3
ON CONFLICT (minute, error_code, type, shard) DO UPDATE SET
    count = e.count + EXCLUDED.count,
    last_finished_at = GREATEST(e.last_finished_at, EXCLUDED.last_finished_at);

-- name: uncount_jobs
-- The opposite of count_batch_jobs, run *before* a write takes jobs out of their final state
-- (a manual retry) or deletes them (prune): those of :job_ids (a JSON array) still final
-- count one fewer each, into this backend's shard (readers sum the shards; prune folds them),
-- in key order. Read by primary key. (The minute figures keep what happened.)
WITH batch AS MATERIALIZED (
    SELECT j.status, j.queue, j.type
    FROM jsonb_array_elements_text(CAST(:job_ids AS jsonb)) AS i (id)
    -- LATERAL … LIMIT 1: one primary-key lookup per id whatever the statistics say
    -- (every path but the worker's runs without its planner settings).
    CROSS JOIN LATERAL (
        SELECT status, queue, type FROM jobs WHERE id = i.id::bigint LIMIT 1
    ) AS j
)
INSERT INTO job_counts AS c (status, queue, type, shard, n)
SELECT status, queue, type, pg_backend_pid(), -COUNT(*) FROM batch
WHERE status IN ('succeeded', 'failed', 'cancelled')
GROUP BY status, queue, type ORDER BY status, queue, type
ON CONFLICT (status, queue, type, shard) DO UPDATE SET n = c.n + EXCLUDED.n;

-- name: uncount_job_errors
-- The opposite of count_batch_errors, run with uncount_jobs: job_errors_minutely equals a
-- count of the rows, so a job leaving its final state or deleted is taken off.
WITH batch AS MATERIALIZED (
    SELECT j.status, j.type, j.error_code, j.finished_at
    FROM jsonb_array_elements_text(CAST(:job_ids AS jsonb)) AS i (id)
    -- LATERAL … LIMIT 1: one primary-key lookup per id whatever the statistics say
    -- (every path but the worker's runs without its planner settings).
    CROSS JOIN LATERAL (
        SELECT status, type, error_code, finished_at FROM jobs WHERE id = i.id::bigint LIMIT 1
    ) AS j
)
INSERT INTO job_errors_minutely AS e (minute, error_code, type, shard, count)
SELECT errands_minute(finished_at), error_code, type, pg_backend_pid(), -COUNT(*)
FROM batch
WHERE status IN ('succeeded', 'failed', 'cancelled') AND finished_at IS NOT NULL
  AND error_code IS NOT NULL
GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
ON CONFLICT (minute, error_code, type, shard) DO UPDATE SET count = e.count + EXCLUDED.count;
