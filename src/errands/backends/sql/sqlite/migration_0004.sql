-- errands schema version 4 (SQLite): a worker's batch of outcomes counts its own figures.
-- The triggers of migration 0002 cost the worker's hot path a third to a half of its
-- throughput (issue #14: a row-level trigger runs three upserts per finished job). The worker's
-- batch transaction now counts the whole batch with one grouped upsert per figure table
-- (jobs.sql: count_batch_jobs, count_batch_minutes), the same formulas as the triggers, and
-- marks itself so the triggers stand aside for its own rows. Every other path — cancel,
-- rescue, retry, prune, graduate, complete_in, an UPDATE of the application's — is still
-- counted by the triggers.

-- The mark: a row here exists only inside a worker's batch transaction (inserted after its
-- BEGIN IMMEDIATE, deleted before its COMMIT; a failure rolls both back). SQLite has one
-- writer, so no other connection ever sees the row — and one a reader could see would be
-- stale (only a committed row is visible): the Pruner's pass deletes any it finds.
CREATE TABLE figures_counted_by_batch (
    id INTEGER PRIMARY KEY
);

-- Per minute (its start), error code and type: jobs that reached a final state carrying an
-- error code, and when the last of them finished — what `top_errors` reads for the finished
-- part of its window (issue #14: it counted every errored row of the window, 80-100 ms at 1M
-- finished). A job that leaves its final state (a manual retry) or is deleted (prune) is taken
-- off again, as job_counts does, so the figure equals a count of the rows. Kept 8 days.
CREATE TABLE job_errors_minutely (
    minute           REAL    NOT NULL,
    error_code       TEXT    NOT NULL,
    type             TEXT    NOT NULL,
    shard            INTEGER NOT NULL DEFAULT 0,
    count            INTEGER NOT NULL DEFAULT 0,
    last_finished_at REAL,
    PRIMARY KEY (minute, error_code, type, shard)
) WITHOUT ROWID;

-- The live part of `top_errors`: jobs not finished that carry an error code (waiting for, or
-- running, a retry), a range bounded by those jobs rather than every errored row.
CREATE INDEX jobs_errors_unfinished ON jobs (error_code, type)
WHERE error_code IS NOT NULL AND finished_at IS NULL;

-- The histogram bucket of a value (COUNT of bounds below it, in the triggers and the batch's
-- queries) as a range of an index instead of a scan of the bounds for every value counted:
-- measured 2 us less per finished job on SQLite.
CREATE INDEX job_stats_bounds_upper ON job_stats_bounds (upper);

-- The triggers that count a job or attempt reaching an outcome, recreated to stand aside
-- while the mark is there: the two a worker's batch fires (a job updated into a final state,
-- an attempt closed with an outcome), and their INSERT twins (for a bulk load that marks
-- itself and recounts, as scripts/bench_ops.py does). Those that take a job out of its final
-- state (a manual retry, a prune) never run in a marked transaction: they are recreated only
-- to take the job off job_errors_minutely too.
DROP TRIGGER jobs_finished_update;
CREATE TRIGGER jobs_finished_update AFTER UPDATE OF status ON jobs
WHEN new.status IN ('succeeded', 'failed', 'cancelled') AND new.status IS NOT old.status
     AND new.finished_at IS NOT NULL
     AND NOT EXISTS (SELECT 1 FROM figures_counted_by_batch)
BEGIN
    INSERT INTO job_counts (status, queue, type, shard, n)
    VALUES (new.status, new.queue, new.type, 0, 1)
    ON CONFLICT (status, queue, type, shard) DO UPDATE SET n = n + 1;
    INSERT INTO job_stats_minutely (measure, minute, queue, bucket, shard, count)
    VALUES (new.status, CAST(new.finished_at / 60 AS INTEGER) * 60.0, new.queue, new.attempts,
            0, 1)
    ON CONFLICT (measure, minute, queue, bucket, shard) DO UPDATE SET count = count + 1;
    INSERT INTO job_stats_minutely (measure, minute, queue, bucket, shard, count, total, maximum)
    SELECT 'wait', CAST(new.finished_at / 60 AS INTEGER) * 60.0, new.queue,
           (SELECT COUNT(*) FROM job_stats_bounds WHERE upper < w.v), 0, 1, w.v, w.v
    FROM (SELECT MAX(new.started_at - new.run_at, 0.0) AS v) AS w
    WHERE new.started_at IS NOT NULL
    ON CONFLICT (measure, minute, queue, bucket, shard) DO UPDATE SET
        count = count + 1, total = total + excluded.total,
        maximum = MAX(maximum, excluded.maximum);
    INSERT INTO job_errors_minutely (minute, error_code, type, shard, count, last_finished_at)
    SELECT CAST(new.finished_at / 60 AS INTEGER) * 60.0, new.error_code, new.type, 0, 1,
           new.finished_at
    WHERE new.error_code IS NOT NULL
    ON CONFLICT (minute, error_code, type, shard) DO UPDATE SET
        count = count + 1, last_finished_at = MAX(last_finished_at, excluded.last_finished_at);
END;

DROP TRIGGER job_attempts_finished_update;
CREATE TRIGGER job_attempts_finished_update AFTER UPDATE OF finished_at ON job_attempts
WHEN old.finished_at IS NULL AND new.finished_at IS NOT NULL
     AND new.status IN ('succeeded', 'failed', 'cancelled')
     AND NOT EXISTS (SELECT 1 FROM figures_counted_by_batch)
BEGIN
    INSERT INTO job_stats_minutely (measure, minute, queue, bucket, shard, count, total, maximum)
    SELECT 'run', CAST(new.finished_at / 60 AS INTEGER) * 60.0, j.queue,
           (SELECT COUNT(*) FROM job_stats_bounds WHERE upper < r.v), 0, 1, r.v, r.v
    FROM (SELECT MAX(new.finished_at - new.started_at, 0.0) AS v) AS r, jobs AS j
    WHERE j.id = new.job_id
    ON CONFLICT (measure, minute, queue, bucket, shard) DO UPDATE SET
        count = count + 1, total = total + excluded.total,
        maximum = MAX(maximum, excluded.maximum);
END;

DROP TRIGGER jobs_finished_insert;
CREATE TRIGGER jobs_finished_insert AFTER INSERT ON jobs
WHEN new.status IN ('succeeded', 'failed', 'cancelled') AND new.finished_at IS NOT NULL
     AND NOT EXISTS (SELECT 1 FROM figures_counted_by_batch)
BEGIN
    INSERT INTO job_counts (status, queue, type, shard, n)
    VALUES (new.status, new.queue, new.type, 0, 1)
    ON CONFLICT (status, queue, type, shard) DO UPDATE SET n = n + 1;
    INSERT INTO job_stats_minutely (measure, minute, queue, bucket, shard, count)
    VALUES (new.status, CAST(new.finished_at / 60 AS INTEGER) * 60.0, new.queue, new.attempts,
            0, 1)
    ON CONFLICT (measure, minute, queue, bucket, shard) DO UPDATE SET count = count + 1;
    INSERT INTO job_stats_minutely (measure, minute, queue, bucket, shard, count, total, maximum)
    SELECT 'wait', CAST(new.finished_at / 60 AS INTEGER) * 60.0, new.queue,
           (SELECT COUNT(*) FROM job_stats_bounds WHERE upper < w.v), 0, 1, w.v, w.v
    FROM (SELECT MAX(new.started_at - new.run_at, 0.0) AS v) AS w
    WHERE new.started_at IS NOT NULL
    ON CONFLICT (measure, minute, queue, bucket, shard) DO UPDATE SET
        count = count + 1, total = total + excluded.total,
        maximum = MAX(maximum, excluded.maximum);
    INSERT INTO job_errors_minutely (minute, error_code, type, shard, count, last_finished_at)
    SELECT CAST(new.finished_at / 60 AS INTEGER) * 60.0, new.error_code, new.type, 0, 1,
           new.finished_at
    WHERE new.error_code IS NOT NULL
    ON CONFLICT (minute, error_code, type, shard) DO UPDATE SET
        count = count + 1, last_finished_at = MAX(last_finished_at, excluded.last_finished_at);
END;

DROP TRIGGER job_attempts_finished_insert;
CREATE TRIGGER job_attempts_finished_insert AFTER INSERT ON job_attempts
WHEN new.finished_at IS NOT NULL AND new.status IN ('succeeded', 'failed', 'cancelled')
     AND NOT EXISTS (SELECT 1 FROM figures_counted_by_batch)
BEGIN
    INSERT INTO job_stats_minutely (measure, minute, queue, bucket, shard, count, total, maximum)
    SELECT 'run', CAST(new.finished_at / 60 AS INTEGER) * 60.0, j.queue,
           (SELECT COUNT(*) FROM job_stats_bounds WHERE upper < r.v), 0, 1, r.v, r.v
    FROM (SELECT MAX(new.finished_at - new.started_at, 0.0) AS v) AS r, jobs AS j
    WHERE j.id = new.job_id
    ON CONFLICT (measure, minute, queue, bucket, shard) DO UPDATE SET
        count = count + 1, total = total + excluded.total,
        maximum = MAX(maximum, excluded.maximum);
END;

DROP TRIGGER jobs_unfinished_update;
CREATE TRIGGER jobs_unfinished_update AFTER UPDATE OF status ON jobs
WHEN old.status IN ('succeeded', 'failed', 'cancelled') AND new.status IS NOT old.status
BEGIN
    UPDATE job_counts SET n = n - 1
    WHERE status = old.status AND queue = old.queue AND type = old.type AND shard = 0;
    UPDATE job_errors_minutely SET count = count - 1
    WHERE minute = CAST(old.finished_at / 60 AS INTEGER) * 60.0 AND error_code = old.error_code
      AND type = old.type AND shard = 0;
END;

DROP TRIGGER jobs_finished_delete;
CREATE TRIGGER jobs_finished_delete AFTER DELETE ON jobs
WHEN old.status IN ('succeeded', 'failed', 'cancelled')
BEGIN
    UPDATE job_counts SET n = n - 1
    WHERE status = old.status AND queue = old.queue AND type = old.type AND shard = 0;
    UPDATE job_errors_minutely SET count = count - 1
    WHERE minute = CAST(old.finished_at / 60 AS INTEGER) * 60.0 AND error_code = old.error_code
      AND type = old.type AND shard = 0;
END;

-- What is already in the tables: the last 8 days' errored jobs.
INSERT INTO job_errors_minutely (minute, error_code, type, shard, count, last_finished_at)
SELECT CAST(finished_at / 60 AS INTEGER) * 60.0 AS m, error_code, type, 0, COUNT(*),
       MAX(finished_at)
FROM jobs
WHERE status IN ('succeeded', 'failed', 'cancelled') AND error_code IS NOT NULL
  AND finished_at >= CAST(strftime('%s', 'now') AS REAL) - 8 * 86400
GROUP BY m, error_code, type;
