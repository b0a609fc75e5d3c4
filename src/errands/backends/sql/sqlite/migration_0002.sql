-- errands schema version 2 (SQLite): figures that triggers keep current, so `stats`,
-- `metrics`, `check` and the dashboard read a few hundred rows however many jobs finished
-- (issue #14: reading every finished row of the last hour took seconds on a busy queue).
-- Triggers, not application code, keep them: every path to and from a final state — a
-- worker's outcome, cancel, rescue, retry, prune, graduate, a hand-written UPDATE — is seen.

-- Histogram bucket bounds in seconds: bucket i counts values <= upper (and above the bound
-- before); values above every bound go to bucket 21. The same bounds as errands.core.rollup.BOUNDS
-- (tests/client/test_stats.py compares), so live figures and rolled-up hours merge exactly.
CREATE TABLE job_stats_bounds (
    bucket INTEGER PRIMARY KEY,
    upper  REAL    NOT NULL
);
INSERT INTO job_stats_bounds (bucket, upper) VALUES
    (0, 0.005), (1, 0.01), (2, 0.025), (3, 0.05), (4, 0.1), (5, 0.25), (6, 0.5), (7, 1.0),
    (8, 2.5), (9, 5.0), (10, 10.0), (11, 30.0), (12, 60.0), (13, 120.0), (14, 300.0),
    (15, 600.0), (16, 1800.0), (17, 3600.0), (18, 7200.0), (19, 21600.0), (20, 86400.0);

-- Jobs in each final state, per queue and type (queued and running are counted live from
-- their partial indexes). shard keeps concurrent writers off each other's rows on PostgreSQL
-- (its backend pid; folded into shard 0 by prune); SQLite has one writer, so always 0.
CREATE TABLE job_counts (
    status TEXT    NOT NULL,
    queue  TEXT    NOT NULL,
    type   TEXT    NOT NULL,
    shard  INTEGER NOT NULL DEFAULT 0,
    n      INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (status, queue, type, shard)
);

-- Per minute and queue (minute: its start): for measure 'succeeded' / 'failed' / 'cancelled'
-- the jobs that reached that state, by attempts used (bucket); for 'wait' (due to start of
-- the last attempt, per finished job) and 'run' (start to outcome of each attempt that ended
-- succeeded, failed or cancelled) count, total and maximum seconds by histogram bucket.
-- Kept 8 days by prune. The key leads with measure so each question is one range per measure.
CREATE TABLE job_stats_minutely (
    measure TEXT    NOT NULL,
    minute  REAL    NOT NULL,
    queue   TEXT    NOT NULL,
    bucket  INTEGER NOT NULL,
    shard   INTEGER NOT NULL DEFAULT 0,
    count   INTEGER NOT NULL DEFAULT 0,
    total   REAL    NOT NULL DEFAULT 0,
    maximum REAL    NOT NULL DEFAULT 0,
    PRIMARY KEY (measure, minute, queue, bucket, shard)
) WITHOUT ROWID;

-- A job enters a final state (inserted finished, or updated into one).
CREATE TRIGGER jobs_finished_insert AFTER INSERT ON jobs
WHEN new.status IN ('succeeded', 'failed', 'cancelled') AND new.finished_at IS NOT NULL
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
END;

CREATE TRIGGER jobs_finished_update AFTER UPDATE OF status ON jobs
WHEN new.status IN ('succeeded', 'failed', 'cancelled') AND new.status IS NOT old.status
     AND new.finished_at IS NOT NULL
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
END;

-- A job leaves a final state (a manual retry) or is deleted in one (prune): one fewer.
CREATE TRIGGER jobs_unfinished_update AFTER UPDATE OF status ON jobs
WHEN old.status IN ('succeeded', 'failed', 'cancelled') AND new.status IS NOT old.status
BEGIN
    UPDATE job_counts SET n = n - 1
    WHERE status = old.status AND queue = old.queue AND type = old.type AND shard = 0;
END;

CREATE TRIGGER jobs_finished_delete AFTER DELETE ON jobs
WHEN old.status IN ('succeeded', 'failed', 'cancelled')
BEGIN
    UPDATE job_counts SET n = n - 1
    WHERE status = old.status AND queue = old.queue AND type = old.type AND shard = 0;
END;

-- An attempt ends with an outcome (a lost attempt has none: its end is when the rescuer
-- noticed, not when the handler stopped).
CREATE TRIGGER job_attempts_finished_update AFTER UPDATE OF finished_at ON job_attempts
WHEN old.finished_at IS NULL AND new.finished_at IS NOT NULL
     AND new.status IN ('succeeded', 'failed', 'cancelled')
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

CREATE TRIGGER job_attempts_finished_insert AFTER INSERT ON job_attempts
WHEN new.finished_at IS NOT NULL AND new.status IN ('succeeded', 'failed', 'cancelled')
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

-- What is already in the tables: every finished job's count, and the last 8 days' figures.
INSERT INTO job_counts (status, queue, type, shard, n)
SELECT status, queue, type, 0, COUNT(*) FROM jobs
WHERE status IN ('succeeded', 'failed', 'cancelled') AND finished_at IS NOT NULL
GROUP BY status, queue, type;

INSERT INTO job_stats_minutely (measure, minute, queue, bucket, shard, count)
SELECT status, CAST(finished_at / 60 AS INTEGER) * 60.0 AS m, queue, attempts, 0, COUNT(*)
FROM jobs
WHERE status IN ('succeeded', 'failed', 'cancelled')
  AND finished_at >= CAST(strftime('%s', 'now') AS REAL) - 8 * 86400
GROUP BY status, m, queue, attempts;

INSERT INTO job_stats_minutely (measure, minute, queue, bucket, shard, count, total, maximum)
SELECT 'wait', m, queue, (SELECT COUNT(*) FROM job_stats_bounds WHERE upper < v) AS b, 0,
       COUNT(*), SUM(v), MAX(v)
FROM (SELECT CAST(finished_at / 60 AS INTEGER) * 60.0 AS m, queue,
             MAX(started_at - run_at, 0.0) AS v
      FROM jobs
      WHERE status IN ('succeeded', 'failed', 'cancelled') AND started_at IS NOT NULL
        AND finished_at >= CAST(strftime('%s', 'now') AS REAL) - 8 * 86400)
GROUP BY m, queue, b;

INSERT INTO job_stats_minutely (measure, minute, queue, bucket, shard, count, total, maximum)
SELECT 'run', m, queue, (SELECT COUNT(*) FROM job_stats_bounds WHERE upper < v) AS b, 0,
       COUNT(*), SUM(v), MAX(v)
FROM (SELECT CAST(a.finished_at / 60 AS INTEGER) * 60.0 AS m, j.queue,
             MAX(a.finished_at - a.started_at, 0.0) AS v
      FROM job_attempts AS a JOIN jobs AS j ON j.id = a.job_id
      WHERE a.status IN ('succeeded', 'failed', 'cancelled') AND a.finished_at IS NOT NULL
        AND a.finished_at >= CAST(strftime('%s', 'now') AS REAL) - 8 * 86400)
GROUP BY m, queue, b;
