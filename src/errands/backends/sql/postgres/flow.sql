-- Flow control (docs/flow-control.md): paused queues, limits, the limited claim, snooze, progress.
-- Same names as sql/sqlite/flow.sql. The limited claim runs in the claim's transaction
-- (READ COMMITTED): limited_groups takes a transaction-level advisory lock per key and group,
-- so every later statement of the claim (the counts, the update) sees each claim of that
-- group that committed before it; another claim of the same group cannot run between this
-- one's count and its commit.

-- name: pause_queue
-- Pause a queue ('*': every queue); pausing a paused queue keeps its first paused_at.
INSERT INTO queue_pauses (queue, paused_at, paused_by, reason)
VALUES (:queue, to_timestamp(:now), :actor, :reason)
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
VALUES (:key, :running, :rate_count, :rate_seconds, to_timestamp(:now))
ON CONFLICT (key) DO NOTHING
RETURNING key;

-- name: code_limit
-- A key's stored code limit and when a worker declaring it was last seen (locked: two
-- workers starting at once compare in turn).
SELECT code_running, code_rate_count, code_rate_seconds, code_seen_at FROM flow_limits
WHERE key = :key
FOR UPDATE;

-- name: refresh_code_limit
-- A live worker still declares this key's stored code limit: it is seen now. No row when
-- the stored caps are not these (another worker's declaration replaced them).
UPDATE flow_limits SET code_seen_at = to_timestamp(:now)
WHERE key = :key AND code_running IS NOT DISTINCT FROM CAST(:running AS integer)
  AND code_rate_count IS NOT DISTINCT FROM CAST(:rate_count AS integer)
  AND code_rate_seconds IS NOT DISTINCT FROM CAST(:rate_seconds AS double precision)
RETURNING key;

-- name: register_code_limit
-- A worker's task declares a limit: its values as code says them (an operator's stay).
INSERT INTO flow_limits (key, code_running, code_rate_count, code_rate_seconds, code_seen_at)
VALUES (:key, :running, :rate_count, :rate_seconds, to_timestamp(:now))
ON CONFLICT (key) DO UPDATE SET code_running = excluded.code_running,
    code_rate_count = excluded.code_rate_count, code_rate_seconds = excluded.code_rate_seconds,
    code_seen_at = excluded.code_seen_at;

-- name: set_limit
-- An operator's limit for a key: wins over the code's until clear_limit.
INSERT INTO flow_limits (key, running, rate_count, rate_seconds, set_at, set_by)
VALUES (:key, :running, :rate_count, :rate_seconds, to_timestamp(:now), :actor)
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
SELECT limit_key, limit_group, COUNT(*) AS n FROM jobs
WHERE status = 'running' AND limit_key IS NOT NULL
GROUP BY limit_key, limit_group;

-- name: limit_queued_counts
-- Waiting jobs per key and group (due or not).
SELECT limit_key, limit_group, COUNT(*) AS n FROM jobs
WHERE status = 'queued' AND limit_key IS NOT NULL
GROUP BY limit_key, limit_group;

-- name: limited_groups
-- The keys and groups with queued jobs after (:after_key, :after_grp) — from the first when
-- :after_key is NULL: where the worker's previous claim stopped, so past :max_groups the scan
-- rotates and every group is reached however many wait (backends/flow.py) — by a skip scan
-- of jobs_limited_due (one index probe per group, however many jobs each holds), each with a
-- transaction-level advisory lock: only those whose lock this claim gets (try-lock: a group
-- another claim holds is passed over, never waited for, so claims cannot deadlock on these
-- locks). With each, the highest priority it holds (its first index entry): the fair turns
-- probe by it (backends/fair.py).
WITH RECURSIVE g (limit_key, limit_group, priority) AS (
    (SELECT limit_key, limit_group, priority FROM jobs
     WHERE status = 'queued' AND limit_key IS NOT NULL AND CAST(:after_key AS text) IS NULL
     ORDER BY limit_key, limit_group, priority DESC LIMIT 1)
    UNION ALL
    (SELECT limit_key, limit_group, priority FROM jobs
     WHERE status = 'queued' AND limit_key IS NOT NULL
       AND (limit_key, limit_group) > (CAST(:after_key AS text), CAST(:after_grp AS text))
     ORDER BY limit_key, limit_group, priority DESC LIMIT 1)
    UNION ALL
    SELECT n.limit_key, n.limit_group, n.priority FROM g, LATERAL (
        SELECT limit_key, limit_group, priority FROM jobs
        WHERE status = 'queued' AND limit_key IS NOT NULL
          AND (limit_key, limit_group) > (g.limit_key, g.limit_group)
        ORDER BY limit_key, limit_group, priority DESC LIMIT 1) AS n
)
SELECT limit_key, limit_group, priority FROM g
WHERE pg_try_advisory_xact_lock(hashtextextended(limit_key || chr(31) || limit_group, 23))
LIMIT :max_groups;

-- name: limit_headroom
-- Per locked group (:groups is a JSON array of [key, group]): its live holders (limited jobs
-- running: a lease not yet recovered counts) and its key's caps in force (an operator's, else
-- the code's; NULL when no cap of that kind, or no limit known for the key). Run after
-- limited_groups, in a statement of its own: its snapshot sees every claim of these groups
-- that committed before their locks were granted.
WITH g AS (
    SELECT e->>0 AS k, e->>1 AS grp FROM jsonb_array_elements(CAST(:groups AS jsonb)) AS e
)
SELECT g.k AS limit_key, g.grp AS limit_group,
       (SELECT COUNT(*) FROM jobs
        WHERE status = 'running' AND limit_key IS NOT NULL
          AND limit_key = g.k AND limit_group = g.grp) AS running,
       CASE WHEN f.set_at IS NULL THEN f.code_running ELSE f.running END AS cap_running,
       CASE WHEN f.set_at IS NULL THEN f.code_rate_count ELSE f.rate_count END AS rate_count,
       CASE WHEN f.set_at IS NULL THEN f.code_rate_seconds ELSE f.rate_seconds END
           AS rate_seconds
FROM g LEFT JOIN flow_limits AS f ON f.key = g.k;

-- name: trim_limit_starts
-- Forget the starts of a key from before :since (the caller keeps a margin past its window).
DELETE FROM limit_starts WHERE key = :key AND started_at <= to_timestamp(:since);

-- name: limit_starts_counts
-- Attempt starts of a key per group inside its window (later ones included: another host's
-- clock may run ahead, and counting them only makes the check stricter).
SELECT grp AS limit_group, COUNT(*) AS n FROM limit_starts
WHERE key = :key AND started_at > to_timestamp(:since)
GROUP BY grp;

-- name: limited_due
-- One group's best due jobs of the worker's types and queues, up to its headroom (:n).
SELECT id, priority, run_at FROM jobs
WHERE {{due_job}}
  AND limit_key IS NOT NULL
  AND limit_key = :key AND limit_group = :grp
ORDER BY priority DESC, run_at, id
LIMIT :n
FOR UPDATE SKIP LOCKED;

-- name: unlimited_due
-- The best due unlimited jobs, as claim chooses them, to weigh against limited ones.
SELECT id, priority, run_at FROM jobs
WHERE {{due_job}}
  AND limit_key IS NULL
ORDER BY priority DESC, run_at, id
LIMIT :n
FOR UPDATE SKIP LOCKED;

-- name: claim_ids
-- Claim the chosen jobs (:job_ids is a JSON array) still queued; claim's columns, and the
-- limit each counts against. Each id is one probe of the primary key whatever the statistics
-- say: with the queued rows underestimated (a burst enqueued since the last ANALYZE), `id IN
-- (SELECT ...)` was planned as a walk of a partial index of queued rows per id (~80 ms for
-- 1,000 ids among 5,000 jobs). Hence the ids as an array, and the status test written so that
-- it implies no partial index's predicate (the same test for a column that is never NULL).
UPDATE jobs
SET status = :to_state,
    attempts = attempts + 1,
    worker_id = :worker_id,
    started_at = to_timestamp(:now),
    heartbeat_at = NULL,
    lease_expires_at = to_timestamp(:now + :lease_seconds),
    finished_at = NULL
WHERE id = ANY(ARRAY(SELECT value::bigint FROM jsonb_array_elements_text(CAST(:job_ids AS jsonb))))
  AND (status = 'queued') IS TRUE
RETURNING id, queue, type, payload, priority, attempts, max_attempts, run_at, created_at,
          cancel_requested, headers, error_code, limit_key, limit_group;

-- name: record_limit_starts
-- The starts of just-claimed rate-limited jobs: :rows is a JSON array of [key, group, job_id].
-- :started_at is the latest moment their handlers may start (the claim's time plus the lease:
-- a worker hands back a job it could not start by then), so until record_handler_starts
-- writes the real start, every window that could hold it counts it.
INSERT INTO limit_starts (key, grp, started_at, job_id)
SELECT e->>0, e->>1, to_timestamp(:started_at), (e->>2)::bigint
FROM jsonb_array_elements(CAST(:rows AS jsonb)) AS e;

-- name: record_handler_starts
-- When the handlers of rate-limited jobs really started: :rows is a JSON array of [job_id,
-- claimed_at, started_at]. Moves the start the claim recorded (at or after claimed_at: an
-- older attempt's row is not touched) to the handler's start, through limit_starts_window.
UPDATE limit_starts AS l SET started_at = to_timestamp(b.s)
FROM (SELECT (e->>0)::bigint AS id, (e->>1)::float8 AS c, (e->>2)::float8 AS s
      FROM jsonb_array_elements(CAST(:rows AS jsonb)) AS e) AS b
JOIN jobs AS j ON j.id = b.id
WHERE l.key = j.limit_key AND l.grp = j.limit_group
  AND l.started_at >= to_timestamp(b.c) AND l.job_id = b.id;

-- name: snooze_job
-- Fenced: a snoozed attempt gives its job back, due at :run_at, with one more attempt allowed
-- (a snooze never uses up the job's attempts).
UPDATE jobs
SET status = :to_state, started_at = to_timestamp(:started_at), run_at = to_timestamp(:run_at),
    max_attempts = max_attempts + 1, lease_expires_at = NULL
WHERE id = :job_id AND attempts = :attempt AND status = :from_state;

-- name: record_progress
-- Fenced like a heartbeat: the latest progress of an attempt this worker still holds.
UPDATE jobs SET progress = :progress, progress_message = :message, progress_at = to_timestamp(:now)
WHERE id = :job_id AND attempts = :attempt AND status = :from_state AND worker_id = :worker_id;
