-- Durable steps, sleeps and signals (backends/steps.py, docs/durable-steps.md).

-- name: record_step
-- Fenced: record one durable call of the attempt that holds the job running; nothing (0 rows)
-- for a stale attempt.
INSERT INTO job_steps (job_id, seq, kind, name, attempt, started_at, finished_at, result,
                       wake_at, signal, ordinal)
SELECT id, :seq, :kind, :name, attempts, :started_at, :finished_at, :result, :wake_at,
       :signal, :ordinal
FROM jobs WHERE id = :job_id AND attempts = :attempt AND status = :from_state;

-- name: record_steps
-- Fenced, many at once (the records of concurrent handlers sharing a commit: step_group.py):
-- :rows is a JSON array of [job_id, attempt, seq, kind, name, started_at, finished_at, result,
-- wake_at, signal, ordinal]. A record whose attempt no longer holds its job running writes
-- nothing; returns the (job_id, seq) written. The unary + keeps the job lookup on the primary
-- key, one probe per record.
INSERT INTO job_steps (job_id, seq, kind, name, attempt, started_at, finished_at, result,
                       wake_at, signal, ordinal)
SELECT j.id, json_extract(r.value, '$[2]'), json_extract(r.value, '$[3]'),
       json_extract(r.value, '$[4]'), j.attempts, json_extract(r.value, '$[5]'),
       json_extract(r.value, '$[6]'), json_extract(r.value, '$[7]'),
       json_extract(r.value, '$[8]'), json_extract(r.value, '$[9]'),
       json_extract(r.value, '$[10]')
FROM json_each(:rows) AS r
JOIN jobs AS j ON j.id = json_extract(r.value, '$[0]')
WHERE j.attempts = json_extract(r.value, '$[1]') AND +j.status = :from_state
RETURNING job_id, seq;

-- name: insert_step
-- Record a durable call inside a write that has fenced (and, on PostgreSQL, locked) its job;
-- a call recorded already is left as it is.
INSERT INTO job_steps (job_id, seq, kind, name, attempt, started_at, finished_at, result,
                       wake_at, signal, ordinal)
VALUES (:job_id, :seq, :kind, :name, :attempt, :started_at, :finished_at, :result, :wake_at,
        :signal, :ordinal)
ON CONFLICT (job_id, seq) DO NOTHING;

-- name: fence_running
-- Fenced read: the job, if this attempt holds it running (PostgreSQL locks the row).
SELECT id FROM jobs WHERE id = :job_id AND attempts = :attempt AND status = :from_state;

-- name: lock_job
-- The job's state, its row locked for the rest of the transaction (PostgreSQL; SQLite's write
-- transaction already excludes every other writer): parking and delivery meet here.
SELECT id, status FROM jobs WHERE id = :job_id;

-- name: job_by_unique_key
-- The newest job holding a unique key that is not final (a signal's target by key).
SELECT id FROM jobs
WHERE unique_key = :unique_key AND status NOT IN (:succeeded, :failed, :cancelled)
ORDER BY id DESC LIMIT 1;

-- name: list_steps
-- A job's recorded durable calls, in call order.
SELECT job_id, seq, kind, name, attempt, started_at, finished_at, result, wake_at, signal,
       ordinal
FROM job_steps WHERE job_id = :job_id ORDER BY seq;

-- name: open_wait
-- The wait a job is parked in (at most one: a run parks at its first unanswered wait).
SELECT seq, signal, ordinal, wake_at FROM job_steps
WHERE job_id = :job_id AND kind = 'wait' AND finished_at IS NULL
ORDER BY seq LIMIT 1;

-- name: nth_signal
-- The signal a wait takes: the :ordinal-th of its name sent to the job (none yet: no row).
SELECT payload FROM job_signals
WHERE job_id = :job_id AND name = :signal
ORDER BY id LIMIT 1 OFFSET :skip;

-- name: finish_wait
-- A wait answered (its signal, or its timeout): what every later run of the job sees.
UPDATE job_steps SET finished_at = :now, result = :result
WHERE job_id = :job_id AND seq = :seq AND finished_at IS NULL;

-- name: insert_signal
-- Keep a signal for the job (delivered by position: the k-th wait_for(name) takes the k-th).
INSERT INTO job_signals (job_id, name, payload, sent_at, actor)
VALUES (:job_id, :name, :payload, :now, :actor);

-- name: suspend_job
-- Fenced: a run ends in a sleep (queued at :run_at) or a wait (waiting); the claim's attempt
-- is given back, as a release does (sleeping and waiting use up no attempt).
UPDATE jobs
SET status = :to_state, attempts = attempts - 1, run_at = COALESCE(:run_at, run_at),
    started_at = :started_at, worker_id = NULL, lease_expires_at = NULL
WHERE id = :job_id AND attempts = :attempt AND status = :from_state;

-- name: wake_job
-- Fenced on the state: a parked job whose signal arrived, or whose wait timed out, is due.
UPDATE jobs SET status = :to_state, run_at = :now
WHERE id = :job_id AND status = :from_state;

-- name: due_waits
-- Parked jobs whose wait's timeout has passed (the open waits' partial index), oldest first.
SELECT s.job_id FROM job_steps AS s JOIN jobs AS j ON j.id = s.job_id
WHERE s.kind = 'wait' AND s.finished_at IS NULL AND s.wake_at <= :now
  AND j.status = :waiting
ORDER BY s.wake_at LIMIT :limit;

-- name: delete_steps
-- Forget a job's recorded durable calls (q.retry(…, reset_steps=True)): a failed or cancelled
-- job only, so a running one never loses its journal.
DELETE FROM job_steps
WHERE job_id = :job_id
  AND EXISTS (SELECT 1 FROM jobs WHERE id = :job_id AND status IN (:failed, :cancelled));

-- name: durable_counts
-- Jobs sleeping (queued behind a sleep whose wake time is ahead: job_steps_sleeps), parked
-- for a signal (the open waits' index), and parked past their wait's timeout by more than
-- :grace seconds — which the rescuer's pass should have answered (errands check). CROSS
-- JOIN keeps job_steps outside: on a table of few or no steps (its statistics say so) SQLite
-- otherwise walks every queued (or waiting) job and looks for its steps (80 ms at 100,000
-- queued).
SELECT
  (SELECT COUNT(DISTINCT s.job_id) FROM job_steps AS s CROSS JOIN jobs AS j ON j.id = s.job_id
   WHERE s.kind = 'sleep' AND s.wake_at > :now AND j.status = :queued) AS sleeping,
  (SELECT COUNT(*) FROM job_steps AS s CROSS JOIN jobs AS j ON j.id = s.job_id
   WHERE s.kind = 'wait' AND s.finished_at IS NULL AND j.status = :waiting) AS signal_waiting,
  (SELECT COUNT(*) FROM job_steps AS s CROSS JOIN jobs AS j ON j.id = s.job_id
   WHERE s.kind = 'wait' AND s.finished_at IS NULL AND s.wake_at <= :now - :grace
     AND j.status = :waiting) AS waits_past_timeout;
