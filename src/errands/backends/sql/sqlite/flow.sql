-- Flow control (docs/flow-control.md): paused queues, limits, the limited claim, snooze, progress.
-- Same names in sql/postgres/flow.sql. The limited claim's queries run inside the claim's
-- write transaction (BEGIN IMMEDIATE: every claim of the database is serialised), so what
-- they count cannot change between the count and the claim.

-- name: pause_queue
-- Pause a queue ('*': every queue); pausing a paused queue keeps its first paused_at.
INSERT INTO queue_pauses (queue, paused_at, paused_by, reason)
VALUES (:queue, :now, :actor, :reason)
ON CONFLICT (queue) DO UPDATE SET paused_by = excluded.paused_by, reason = excluded.reason
RETURNING queue;

-- name: resume_queue
-- Resume one queue (a '*' pause still holds it).
DELETE FROM queue_pauses WHERE queue = :queue RETURNING queue;

-- name: resume_all_queues
-- Resume every queue: the '*' pause and each queue's own.
DELETE FROM queue_pauses RETURNING queue;

-- name: paused_queues
-- Every pause, by queue name.
SELECT queue, paused_at, paused_by, reason FROM queue_pauses ORDER BY queue;

-- name: active_queue_counts
-- Queued and running jobs per queue (the active partial indexes answer it).
SELECT queue, 'queued' AS status, COUNT(*) AS n FROM jobs WHERE status = 'queued' GROUP BY queue
UNION ALL
SELECT queue, 'running' AS status, COUNT(*) AS n FROM jobs WHERE status = 'running'
GROUP BY queue;

-- name: insert_code_limit
-- The first declaration of a key's code limit (none stored yet): returns the key if written.
INSERT INTO flow_limits (key, code_running, code_rate_count, code_rate_seconds, code_seen_at)
VALUES (:key, :running, :rate_count, :rate_seconds, :now)
ON CONFLICT (key) DO NOTHING
RETURNING key;

-- name: code_limit
-- A key's stored code limit and when a worker declaring it was last seen.
SELECT code_running, code_rate_count, code_rate_seconds, code_seen_at FROM flow_limits
WHERE key = :key;

-- name: refresh_code_limit
-- A live worker still declares this key's stored code limit: it is seen now. No row when
-- the stored caps are not these (another worker's declaration replaced them).
UPDATE flow_limits SET code_seen_at = :now
WHERE key = :key AND code_running IS :running AND code_rate_count IS :rate_count
  AND code_rate_seconds IS :rate_seconds
RETURNING key;

-- name: register_code_limit
-- A worker's task declares a limit: its values as code says them (an operator's stay).
INSERT INTO flow_limits (key, code_running, code_rate_count, code_rate_seconds, code_seen_at)
VALUES (:key, :running, :rate_count, :rate_seconds, :now)
ON CONFLICT (key) DO UPDATE SET code_running = excluded.code_running,
    code_rate_count = excluded.code_rate_count, code_rate_seconds = excluded.code_rate_seconds,
    code_seen_at = excluded.code_seen_at;

-- name: set_limit
-- An operator's limit for a key: wins over the code's until clear_limit.
INSERT INTO flow_limits (key, running, rate_count, rate_seconds, set_at, set_by)
VALUES (:key, :running, :rate_count, :rate_seconds, :now, :actor)
ON CONFLICT (key) DO UPDATE SET running = excluded.running, rate_count = excluded.rate_count,
    rate_seconds = excluded.rate_seconds, set_at = excluded.set_at, set_by = excluded.set_by;

-- name: clear_limit
-- Drop an operator's limit: the code's applies again.
UPDATE flow_limits SET running = NULL, rate_count = NULL, rate_seconds = NULL, set_at = NULL,
    set_by = NULL
WHERE key = :key AND set_at IS NOT NULL
RETURNING key;

-- name: limit_caps
-- Every key's limit in force (an operator's, else the code's), with both sources.
SELECT key,
       CASE WHEN set_at IS NULL THEN code_running ELSE running END AS running,
       CASE WHEN set_at IS NULL THEN code_rate_count ELSE rate_count END AS rate_count,
       CASE WHEN set_at IS NULL THEN code_rate_seconds ELSE rate_seconds END AS rate_seconds,
       code_running, code_rate_count, code_rate_seconds, code_seen_at, set_at, set_by
FROM flow_limits ORDER BY key;

-- name: limit_running_counts
-- Live holders per key and group: limited jobs running (a lease not yet recovered counts).
SELECT limit_key, limit_group, COUNT(*) AS n FROM jobs INDEXED BY jobs_limited_running
WHERE status = 'running' AND limit_key IS NOT NULL
GROUP BY limit_key, limit_group;

-- name: limit_queued_counts
-- Waiting jobs per key and group (due or not).
SELECT limit_key, limit_group, COUNT(*) AS n FROM jobs INDEXED BY jobs_limited_due
WHERE status = 'queued' AND limit_key IS NOT NULL
GROUP BY limit_key, limit_group;

-- name: limited_groups
-- The keys and groups with queued jobs after (:after_key, :after_grp) — from the first when
-- :after_key is NULL: where the worker's previous claim stopped, so past :max_groups the scan
-- rotates and every group is reached however many wait (backends/flow.py) — by a skip scan
-- of jobs_limited_due: one index probe per group, however many jobs each holds (100,000
-- behind one key cost one probe). SQLite returns them all: BEGIN IMMEDIATE already
-- serialises every claim of the database (the PostgreSQL query also locks each group). With
-- each, the highest priority it holds (its first index entry): the fair turns probe by it.
WITH RECURSIVE g (limit_key, limit_group, priority) AS (
    SELECT j.limit_key, j.limit_group, j.priority FROM jobs AS j
    WHERE j.id = COALESCE(
        (SELECT id FROM jobs INDEXED BY jobs_limited_due
         WHERE status = 'queued' AND limit_key IS NOT NULL AND :after_key IS NULL
         ORDER BY limit_key, limit_group, priority DESC LIMIT 1),
        (SELECT id FROM jobs INDEXED BY jobs_limited_due
         WHERE status = 'queued' AND limit_key IS NOT NULL
           AND limit_key = :after_key AND limit_group > :after_grp
         ORDER BY limit_key, limit_group, priority DESC LIMIT 1),
        (SELECT id FROM jobs INDEXED BY jobs_limited_due
         WHERE status = 'queued' AND limit_key IS NOT NULL AND limit_key > :after_key
         ORDER BY limit_key, limit_group, priority DESC LIMIT 1))
    UNION ALL
    -- The next group: of the same key, else of the next key. Two index ranges, not a row
    -- value (limit_key, limit_group) > (…): SQLite ranges only on limit_key for that, and
    -- would read every waiting job of the key.
    SELECT j.limit_key, j.limit_group, j.priority FROM g, jobs AS j
    WHERE j.id = COALESCE(
        (SELECT id FROM jobs INDEXED BY jobs_limited_due
         WHERE status = 'queued' AND limit_key IS NOT NULL
           AND limit_key = g.limit_key AND limit_group > g.limit_group
         ORDER BY limit_key, limit_group, priority DESC LIMIT 1),
        (SELECT id FROM jobs INDEXED BY jobs_limited_due
         WHERE status = 'queued' AND limit_key IS NOT NULL AND limit_key > g.limit_key
         ORDER BY limit_key, limit_group, priority DESC LIMIT 1))
)
SELECT limit_key, limit_group, priority FROM g LIMIT :max_groups;

-- name: limit_headroom
-- Per locked group (:groups is a JSON array of [key, group]): its live holders (limited jobs
-- running: a lease not yet recovered counts) and its key's caps in force (an operator's, else
-- the code's; NULL when no cap of that kind, or no limit known for the key).
WITH g AS (
    SELECT json_extract(value, '$[0]') AS k, json_extract(value, '$[1]') AS grp
    FROM json_each(:groups)
)
SELECT g.k AS limit_key, g.grp AS limit_group,
       (SELECT COUNT(*) FROM jobs INDEXED BY jobs_limited_running
        WHERE status = 'running' AND limit_key IS NOT NULL
          AND limit_key = g.k AND limit_group = g.grp) AS running,
       CASE WHEN f.set_at IS NULL THEN f.code_running ELSE f.running END AS cap_running,
       CASE WHEN f.set_at IS NULL THEN f.code_rate_count ELSE f.rate_count END AS rate_count,
       CASE WHEN f.set_at IS NULL THEN f.code_rate_seconds ELSE f.rate_seconds END
           AS rate_seconds
FROM g LEFT JOIN flow_limits AS f ON f.key = g.k;

-- name: trim_limit_starts
-- Forget the starts of a key from before :since (the caller keeps a margin past its window).
DELETE FROM limit_starts WHERE key = :key AND started_at <= :since;

-- name: limit_starts_counts
-- Attempt starts of a key per group inside its window (later ones included: another host's
-- clock may run ahead, and counting them only makes the check stricter).
SELECT grp AS limit_group, COUNT(*) AS n FROM limit_starts
WHERE key = :key AND started_at > :since
GROUP BY grp;

-- name: limited_due
-- One group's best due jobs of the worker's types and queues, up to its headroom (:n).
SELECT id, priority, run_at FROM jobs INDEXED BY jobs_limited_due
WHERE {{due_job}}
  AND limit_key IS NOT NULL
  AND limit_key = :key AND limit_group = :grp
ORDER BY priority DESC, run_at, id
LIMIT :n;

-- name: unlimited_due
-- The best due unlimited jobs, as claim chooses them, to weigh against limited ones.
SELECT id, priority, run_at FROM jobs INDEXED BY jobs_due
WHERE {{due_job}}
  AND limit_key IS NULL
ORDER BY priority DESC, run_at, id
LIMIT :n;

-- name: claim_ids
-- Claim the chosen jobs (:job_ids is a JSON array) still queued; claim's columns, and the
-- limit each counts against.
UPDATE jobs
SET status = :to_state,
    attempts = attempts + 1,
    worker_id = :worker_id,
    started_at = :now,
    heartbeat_at = NULL,
    lease_expires_at = :now + :lease_seconds,
    finished_at = NULL
WHERE id IN (SELECT value FROM json_each(:job_ids)) AND status = 'queued'
RETURNING id, queue, type, payload, priority, attempts, max_attempts, run_at, created_at, cancel_requested,
          headers, error_code, limit_key, limit_group;

-- name: record_limit_starts
-- The starts of just-claimed rate-limited jobs: :rows is a JSON array of [key, group, job_id].
-- :started_at is the latest moment their handlers may start (the claim's time plus the lease:
-- a worker hands back a job it could not start by then), so until record_handler_starts
-- writes the real start, every window that could hold it counts it.
INSERT INTO limit_starts (key, grp, started_at, job_id)
SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), :started_at,
       json_extract(value, '$[2]')
FROM json_each(:rows);

-- name: record_handler_starts
-- When the handlers of rate-limited jobs really started: :rows is a JSON array of [job_id,
-- claimed_at, started_at]. Moves the start the claim recorded (at or after claimed_at: an
-- older attempt's row is not touched) to the handler's start, through limit_starts_window.
UPDATE limit_starts SET started_at = b.s
FROM (SELECT json_extract(value, '$[0]') AS id, json_extract(value, '$[1]') AS c,
             json_extract(value, '$[2]') AS s
      FROM json_each(:rows)) AS b, jobs AS j
WHERE j.id = b.id AND limit_starts.key = j.limit_key AND limit_starts.grp = j.limit_group
  AND limit_starts.started_at >= b.c AND limit_starts.job_id = b.id;

-- name: snooze_job
-- Fenced: a snoozed attempt gives its job back, due at :run_at, with one more attempt allowed
-- (a snooze never uses up the job's attempts).
UPDATE jobs
SET status = :to_state, started_at = :started_at, run_at = :run_at,
    max_attempts = max_attempts + 1, lease_expires_at = NULL
WHERE id = :job_id AND attempts = :attempt AND status = :from_state;

-- name: record_progress
-- Fenced like a heartbeat: the latest progress of an attempt this worker still holds.
UPDATE jobs SET progress = :progress, progress_message = :message, progress_at = :now
WHERE id = :job_id AND attempts = :attempt AND status = :from_state AND worker_id = :worker_id;
