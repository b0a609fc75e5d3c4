-- errands schema version 2 (PostgreSQL): the same tables as sql/sqlite/migration_0002.sql,
-- kept current by triggers, so `stats`, `metrics`, `check` and the dashboard read a few hundred
-- rows however many jobs finished (issue #14). Every path to and from a final state is seen.
--
-- Concurrency: each backend writes only rows of its own shard (pg_backend_pid()), so workers
-- finishing jobs of the same queue in the same minute never wait on (or deadlock over) each
-- other's counter rows; readers sum the shards, and prune folds them into shard 0 with
-- SKIP LOCKED (ops.sql: fold_count_shards), never waiting on a worker.

CREATE TABLE job_stats_bounds (
    bucket integer          PRIMARY KEY,
    upper  double precision NOT NULL
);
INSERT INTO job_stats_bounds (bucket, upper) VALUES
    (0, 0.005), (1, 0.01), (2, 0.025), (3, 0.05), (4, 0.1), (5, 0.25), (6, 0.5), (7, 1.0),
    (8, 2.5), (9, 5.0), (10, 10.0), (11, 30.0), (12, 60.0), (13, 120.0), (14, 300.0),
    (15, 600.0), (16, 1800.0), (17, 3600.0), (18, 7200.0), (19, 21600.0), (20, 86400.0);

CREATE TABLE job_counts (
    status text    NOT NULL,
    queue  text    NOT NULL,
    type   text    NOT NULL,
    shard  integer NOT NULL DEFAULT 0,
    n      bigint  NOT NULL DEFAULT 0,
    PRIMARY KEY (status, queue, type, shard)
);

CREATE TABLE job_stats_minutely (
    measure text             NOT NULL,
    minute  timestamptz      NOT NULL,
    queue   text             NOT NULL,
    bucket  integer          NOT NULL,
    shard   integer          NOT NULL DEFAULT 0,
    count   bigint           NOT NULL DEFAULT 0,
    total   double precision NOT NULL DEFAULT 0,
    maximum double precision NOT NULL DEFAULT 0,
    PRIMARY KEY (measure, minute, queue, bucket, shard)
);

-- One figure into this backend's shard of a minute row.
CREATE FUNCTION errands_minute_add(
    p_measure text, p_at timestamptz, p_queue text, p_bucket integer, p_value double precision
) RETURNS void LANGUAGE sql AS $$
    INSERT INTO job_stats_minutely AS m (measure, minute, queue, bucket, shard, count, total,
                                         maximum)
    VALUES (p_measure, date_trunc('minute', p_at), p_queue, p_bucket, pg_backend_pid(), 1,
            COALESCE(p_value, 0), COALESCE(p_value, 0))
    ON CONFLICT (measure, minute, queue, bucket, shard) DO UPDATE SET
        count = m.count + 1, total = m.total + EXCLUDED.total,
        maximum = GREATEST(m.maximum, EXCLUDED.maximum);
$$;

CREATE FUNCTION errands_bucket(p_value double precision) RETURNS integer LANGUAGE sql STABLE AS $$
    SELECT COUNT(*)::integer FROM job_stats_bounds WHERE upper < p_value;
$$;

CREATE FUNCTION errands_jobs_counted() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    w double precision;
BEGIN
    IF TG_OP <> 'INSERT' AND OLD.status IN ('succeeded', 'failed', 'cancelled') THEN
        INSERT INTO job_counts AS c (status, queue, type, shard, n)
        VALUES (OLD.status, OLD.queue, OLD.type, pg_backend_pid(), -1)
        ON CONFLICT (status, queue, type, shard) DO UPDATE SET n = c.n - 1;
    END IF;
    IF TG_OP <> 'DELETE' AND NEW.status IN ('succeeded', 'failed', 'cancelled')
       AND NEW.finished_at IS NOT NULL THEN
        INSERT INTO job_counts AS c (status, queue, type, shard, n)
        VALUES (NEW.status, NEW.queue, NEW.type, pg_backend_pid(), 1)
        ON CONFLICT (status, queue, type, shard) DO UPDATE SET n = c.n + 1;
        PERFORM errands_minute_add(NEW.status, NEW.finished_at, NEW.queue, NEW.attempts, NULL);
        IF NEW.started_at IS NOT NULL THEN
            w := GREATEST(EXTRACT(EPOCH FROM NEW.started_at) - EXTRACT(EPOCH FROM NEW.run_at), 0);
            PERFORM errands_minute_add('wait', NEW.finished_at, NEW.queue, errands_bucket(w), w);
        END IF;
    END IF;
    RETURN NULL;
END;
$$;

CREATE FUNCTION errands_attempts_counted() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    r double precision;
BEGIN
    r := GREATEST(EXTRACT(EPOCH FROM NEW.finished_at) - EXTRACT(EPOCH FROM NEW.started_at), 0);
    PERFORM errands_minute_add('run', NEW.finished_at, j.queue, errands_bucket(r), r)
    FROM jobs AS j WHERE j.id = NEW.job_id;
    RETURN NULL;
END;
$$;

-- WHEN clauses are checked in C: claims, heartbeats and retries of active jobs never call
-- the functions.
CREATE TRIGGER jobs_finished_insert AFTER INSERT ON jobs FOR EACH ROW
WHEN (NEW.status IN ('succeeded', 'failed', 'cancelled'))
EXECUTE FUNCTION errands_jobs_counted();

CREATE TRIGGER jobs_finished_update AFTER UPDATE OF status ON jobs FOR EACH ROW
WHEN (NEW.status IS DISTINCT FROM OLD.status
      AND (NEW.status IN ('succeeded', 'failed', 'cancelled')
           OR OLD.status IN ('succeeded', 'failed', 'cancelled')))
EXECUTE FUNCTION errands_jobs_counted();

CREATE TRIGGER jobs_finished_delete AFTER DELETE ON jobs FOR EACH ROW
WHEN (OLD.status IN ('succeeded', 'failed', 'cancelled'))
EXECUTE FUNCTION errands_jobs_counted();

CREATE TRIGGER job_attempts_finished_update AFTER UPDATE OF finished_at ON job_attempts
FOR EACH ROW
WHEN (OLD.finished_at IS NULL AND NEW.finished_at IS NOT NULL
      AND NEW.status IN ('succeeded', 'failed', 'cancelled'))
EXECUTE FUNCTION errands_attempts_counted();

CREATE TRIGGER job_attempts_finished_insert AFTER INSERT ON job_attempts FOR EACH ROW
WHEN (NEW.finished_at IS NOT NULL AND NEW.status IN ('succeeded', 'failed', 'cancelled'))
EXECUTE FUNCTION errands_attempts_counted();

-- What is already in the tables: every finished job's count, and the last 8 days' figures.
INSERT INTO job_counts (status, queue, type, shard, n)
SELECT status, queue, type, 0, COUNT(*) FROM jobs
WHERE status IN ('succeeded', 'failed', 'cancelled') AND finished_at IS NOT NULL
GROUP BY status, queue, type;

INSERT INTO job_stats_minutely (measure, minute, queue, bucket, shard, count)
SELECT status, date_trunc('minute', finished_at), queue, attempts, 0, COUNT(*)
FROM jobs
WHERE status IN ('succeeded', 'failed', 'cancelled')
  AND finished_at >= now() - interval '8 days'
GROUP BY 1, 2, 3, 4;

INSERT INTO job_stats_minutely (measure, minute, queue, bucket, shard, count, total, maximum)
SELECT 'wait', m, queue, errands_bucket(v), 0, COUNT(*), SUM(v), MAX(v)
FROM (SELECT date_trunc('minute', finished_at) AS m, queue,
             GREATEST(EXTRACT(EPOCH FROM started_at) - EXTRACT(EPOCH FROM run_at), 0)::float8 AS v
      FROM jobs
      WHERE status IN ('succeeded', 'failed', 'cancelled') AND started_at IS NOT NULL
        AND finished_at >= now() - interval '8 days') AS f
GROUP BY 1, 2, 3, 4;

INSERT INTO job_stats_minutely (measure, minute, queue, bucket, shard, count, total, maximum)
SELECT 'run', m, queue, errands_bucket(v), 0, COUNT(*), SUM(v), MAX(v)
FROM (SELECT date_trunc('minute', a.finished_at) AS m, j.queue,
             GREATEST(EXTRACT(EPOCH FROM a.finished_at)
                      - EXTRACT(EPOCH FROM a.started_at), 0)::float8 AS v
      FROM job_attempts AS a JOIN jobs AS j ON j.id = a.job_id
      WHERE a.status IN ('succeeded', 'failed', 'cancelled') AND a.finished_at IS NOT NULL
        AND a.finished_at >= now() - interval '8 days') AS f
GROUP BY 1, 2, 3, 4;
