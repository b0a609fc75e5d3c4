-- Named queries only the PostgreSQL dialect has (sql.own_queries): each does in one statement
-- what several shared queries do, where a round trip to the server is what costs. A hook on
-- PostgresBackend runs it in place of the shared sequence; the shared queries stay, for SQLite
-- (in-process: a statement costs no round trip) and for the parity tests — but for those this
-- dialect could never run (sql.REPLACED: claim, whose three ranges are written here only).

-- name: claim_recorded
-- The plain claim: SQLite's claim, open_attempts and insert_claimed_events in one statement
-- (data-modifying CTEs; this dialect has no claim of its own, sql.REPLACED). Up to :limit due
-- jobs of the worker's types and queues, highest priority first; unlimited jobs only (limited
-- ones: flow.sql, claim_ids_recorded), none of a paused queue (each range: due_job, due.sql).
-- error_code is the previous attempt's (a claim does not clear it): LOST:LEASE_EXPIRED puts
-- the job in quarantine (worker/quarantine.py). SKIP LOCKED: concurrent claimers pass over
-- rows another transaction is claiming instead of waiting for it, so many workers never claim
-- the same attempt and never queue up on a lock. The scan resumes from the claimer's position
-- (backends/claim_position.py): jobs of a higher priority than :after_priority from the front
-- of jobs_due, that priority past (:after_run_at, :after_id), lower ones from their front.
-- Dead entries of jobs claimed before the position (kept in the index while a long transaction
-- holds back VACUUM) are not read. :after_priority above every priority scans from the front.
-- Then the claimed jobs' attempt rows and — when :event is not NULL (the audit records
-- CLAIMED) — their CLAIMED events, with the detail insert_claimed_events writes. Returns
-- SQLite's claim's columns in its order (tests/backends/test_sql_columns.py).
WITH above AS (
    SELECT id FROM jobs
    WHERE {{due_job}}
      AND limit_key IS NULL
      AND priority > CAST(:after_priority AS bigint)
    ORDER BY priority DESC, run_at, id
    LIMIT :limit
    FOR UPDATE SKIP LOCKED
), level AS (
    SELECT id FROM jobs
    WHERE {{due_job}}
      AND limit_key IS NULL
      AND priority = CAST(:after_priority AS bigint)
      AND (run_at, id) > (to_timestamp(:after_run_at), CAST(:after_id AS bigint))
    ORDER BY priority DESC, run_at, id
    LIMIT :limit
    FOR UPDATE SKIP LOCKED
), below AS (
    SELECT id FROM jobs
    WHERE {{due_job}}
      AND limit_key IS NULL
      AND priority < CAST(:after_priority AS bigint)
    ORDER BY priority DESC, run_at, id
    LIMIT :limit
    FOR UPDATE SKIP LOCKED
), due AS (
    -- The three ranges in claim order; each is read only as far as the LIMIT needs.
    SELECT id FROM above UNION ALL SELECT id FROM level UNION ALL SELECT id FROM below
    LIMIT :limit
), claimed AS (
    UPDATE jobs
    SET status = :to_state,
        attempts = jobs.attempts + 1,
        worker_id = :worker_id,
        started_at = to_timestamp(:now),
        heartbeat_at = NULL,
        lease_expires_at = to_timestamp(:now + :lease_seconds),
        finished_at = NULL
    FROM due
    WHERE jobs.id = due.id
    RETURNING jobs.id, jobs.queue, jobs.type, jobs.payload, jobs.priority, jobs.attempts,
              jobs.max_attempts, jobs.run_at, jobs.created_at, jobs.cancel_requested,
              jobs.headers, jobs.error_code
), opened AS (
    INSERT INTO job_attempts (job_id, attempt, worker_id, started_at, status)
    SELECT id, attempts, :worker_id, to_timestamp(:now), :status FROM claimed
), recorded AS (
    INSERT INTO job_events (job_id, ts, event, actor, detail)
    SELECT id, to_timestamp(:now), :event, :worker_id, jsonb_build_object('attempt', attempts)
    FROM claimed
    WHERE CAST(:event AS text) IS NOT NULL
)
SELECT id, queue, type, payload, priority, attempts, max_attempts, run_at, created_at,
       cancel_requested, headers, error_code
FROM claimed;

-- name: claim_ids_recorded
-- The limited claim's writes in one statement (backends/pg_claim.py): claim_ids (the chosen
-- jobs, :job_ids, still queued), open_attempts, insert_claimed_events (when :event is not
-- NULL), record_limit_starts for the claimed jobs of the rate-counted groups (:rated, a JSON
-- object of key -> {group: 1}; the start recorded is :started_at), and the fair turns they
-- served (:picks, a JSON object of job id -> [start tag, finish tag]; a fair job's key and
-- value are its limit_key and limit_group): per value claimed, its tag moves to its largest
-- finish (save_fair_tags), per key the clock to the largest start claimed
-- (advance_fair_clock); a pick whose job was not claimed counts for nothing. Each JSON
-- parameter is read once (an uncorrelated subquery) and looked up per claimed row by key,
-- not joined: the claimed rows are estimated at one, and a nested loop over two lists of
-- 1,000 is a million comparisons. Returns claim_ids' columns (tests/backends/test_sql_columns.py).
WITH claimed AS (
    UPDATE jobs
    SET status = :to_state,
        attempts = attempts + 1,
        worker_id = :worker_id,
        started_at = to_timestamp(:now),
        heartbeat_at = NULL,
        lease_expires_at = to_timestamp(:now + :lease_seconds),
        finished_at = NULL
    WHERE id = ANY(ARRAY(SELECT value::bigint
                         FROM jsonb_array_elements_text(CAST(:job_ids AS jsonb))))
      AND (status = 'queued') IS TRUE
    RETURNING id, queue, type, payload, priority, attempts, max_attempts, run_at, created_at,
              cancel_requested, headers, error_code, limit_key, limit_group
), opened AS (
    INSERT INTO job_attempts (job_id, attempt, worker_id, started_at, status)
    SELECT id, attempts, :worker_id, to_timestamp(:now), :status FROM claimed
), recorded AS (
    INSERT INTO job_events (job_id, ts, event, actor, detail)
    SELECT id, to_timestamp(:now), :event, :worker_id, jsonb_build_object('attempt', attempts)
    FROM claimed
    WHERE CAST(:event AS text) IS NOT NULL
), started AS (
    INSERT INTO limit_starts (key, grp, started_at, job_id)
    SELECT limit_key, limit_group, to_timestamp(:started_at), id FROM claimed
    WHERE ((SELECT CAST(:rated AS jsonb)) -> limit_key) ? limit_group
), served AS (
    SELECT limit_key AS key, limit_group AS value, (SELECT CAST(:picks AS jsonb)) -> id::text AS tags
    FROM claimed
), tagged AS (
    INSERT INTO fair_turns (key, value, tag)
    SELECT key, value, MAX((tags->>1)::double precision) FROM served
    WHERE tags IS NOT NULL
    GROUP BY key, value
    ON CONFLICT (key, value) DO UPDATE SET tag = GREATEST(fair_turns.tag, excluded.tag)
), clocked AS (
    INSERT INTO fair_clocks (key, vtime)
    SELECT key, MAX((tags->>0)::double precision) FROM served
    WHERE tags IS NOT NULL
    GROUP BY key
    ON CONFLICT (key) DO UPDATE SET vtime = GREATEST(fair_clocks.vtime, excluded.vtime)
)
SELECT id, queue, type, payload, priority, attempts, max_attempts, run_at, created_at,
       cancel_requested, headers, error_code, limit_key, limit_group
FROM claimed;

-- name: insert_job_recorded
-- insert_job, its ENQUEUED event (when :event is not NULL: the audit records ENQUEUED; with
-- insert_event's values) and — when :notify (the job is due) — the wake-up NOTIFY, in one
-- statement: the one-by-one enqueue's whole write. Like insert_job, a unique_key already held
-- by an active job (or within unique_for by a succeeded one) inserts nothing, records nothing, returns no row. Returns insert_job's
-- columns (tests/backends/test_sql_columns.py). NOTIFY is delivered at commit, or never.
WITH inserted AS (
    INSERT INTO jobs (queue, type, payload, status, priority, max_attempts, run_at, created_at,
                      unique_key, headers, limit_key, limit_group, unique_for, expires_in,
                      expires_at, deadline_at)
    SELECT :queue, :type, CAST(:payload AS jsonb), :to_state, :priority, :max_attempts,
           to_timestamp(:run_at), to_timestamp(:now), CAST(:unique_key AS text),
           CAST(:headers AS jsonb), CAST(:limit_key AS text), CAST(:limit_group AS text),
           CAST(:unique_for AS double precision), CAST(:expires_in AS double precision),
           to_timestamp(CAST(:expires_at AS double precision)),
           to_timestamp(CAST(:deadline_at AS double precision))
    WHERE NOT EXISTS (SELECT 1 FROM jobs AS h
                      WHERE h.unique_key = CAST(:unique_key AS text)
                        AND h.status = 'succeeded' AND h.unique_for IS NOT NULL
                        AND h.finished_at + make_interval(secs => h.unique_for) > to_timestamp(:now))
    ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND status IN ('queued', 'running')
    DO NOTHING
    RETURNING id
), recorded AS (
    INSERT INTO job_events (job_id, ts, event, actor, detail)
    SELECT id, to_timestamp(:now), :event, :actor, NULL FROM inserted
    WHERE CAST(:event AS text) IS NOT NULL
)
SELECT inserted.id
FROM inserted
LEFT JOIN LATERAL (
    SELECT pg_notify('errands_jobs', '') WHERE CAST(:notify AS boolean)
) AS woken ON true;
