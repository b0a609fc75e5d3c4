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

-- The start of the minute holding a time, cut from the epoch (date_trunc would follow the
-- session's time zone).
CREATE FUNCTION errands_minute(p_at timestamptz) RETURNS timestamptz LANGUAGE sql IMMUTABLE AS $$
    SELECT to_timestamp(floor(EXTRACT(EPOCH FROM p_at) / 60) * 60);
$$;

CREATE FUNCTION errands_bucket(p_value double precision) RETURNS integer LANGUAGE sql STABLE AS $$
    SELECT COUNT(*)::integer FROM job_stats_bounds WHERE upper < p_value;
$$;

-- Statement-level triggers with transition tables: one upsert per key per statement — a
-- worker's batch of outcomes is one UPDATE — rather than several per row (row-level triggers
-- made the claim/finish path about 3x slower, measured), taken in key order.
CREATE FUNCTION errands_jobs_changed() RETURNS trigger LANGUAGE plpgsql
    -- The worker's batch transactions forbid sorts, scans and hash/merge joins (stale
    -- statistics after a bulk enqueue, see postgres.py); joining transition tables, which
    -- have no index, needs them back or a batch of n rows costs n² comparisons.
    SET enable_hashjoin = on SET enable_mergejoin = on SET enable_sort = on
    SET enable_seqscan = on SET enable_bitmapscan = on
AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        WITH moved AS (
            SELECT o.status AS old_status, n.status, n.queue, n.type, n.attempts, n.run_at,
                   n.started_at, n.finished_at
            FROM new_rows AS n JOIN old_rows AS o ON o.id = n.id
            WHERE o.status IS DISTINCT FROM n.status
              AND (o.status IN ('succeeded', 'failed', 'cancelled')
                   OR n.status IN ('succeeded', 'failed', 'cancelled'))
        ), counted AS (
            INSERT INTO job_counts AS c (status, queue, type, shard, n)
            SELECT status, queue, type, pg_backend_pid(), SUM(d) FROM (
                SELECT status, queue, type, 1 AS d FROM moved
                WHERE status IN ('succeeded', 'failed', 'cancelled') AND finished_at IS NOT NULL
                UNION ALL
                SELECT old_status, queue, type, -1 FROM moved
                WHERE old_status IN ('succeeded', 'failed', 'cancelled')
            ) AS d
            GROUP BY status, queue, type ORDER BY status, queue, type
            ON CONFLICT (status, queue, type, shard) DO UPDATE SET n = c.n + EXCLUDED.n
        )  -- a data-modifying WITH runs to completion, referenced or not
        INSERT INTO job_stats_minutely AS m
            (measure, minute, queue, bucket, shard, count, total, maximum)
        SELECT measure, minute, queue, bucket, pg_backend_pid(), COUNT(*), SUM(v), MAX(v)
        FROM (
            SELECT status AS measure, errands_minute(finished_at) AS minute, queue,
                   attempts AS bucket, 0::float8 AS v
            FROM moved
            WHERE status IN ('succeeded', 'failed', 'cancelled') AND finished_at IS NOT NULL
            UNION ALL
            SELECT 'wait', errands_minute(finished_at), queue, errands_bucket(w), w
            FROM (SELECT finished_at, queue,
                         GREATEST(EXTRACT(EPOCH FROM started_at) - EXTRACT(EPOCH FROM run_at),
                                  0)::float8 AS w
                  FROM moved
                  WHERE status IN ('succeeded', 'failed', 'cancelled')
                    AND finished_at IS NOT NULL AND started_at IS NOT NULL) AS waits
        ) AS f
        GROUP BY measure, minute, queue, bucket ORDER BY measure, minute, queue, bucket
        ON CONFLICT (measure, minute, queue, bucket, shard) DO UPDATE SET
            count = m.count + EXCLUDED.count, total = m.total + EXCLUDED.total,
            maximum = GREATEST(m.maximum, EXCLUDED.maximum);
    ELSIF TG_OP = 'INSERT' THEN
        WITH moved AS (
            SELECT NULL::text AS old_status, n.status, n.queue, n.type, n.attempts, n.run_at,
                   n.started_at, n.finished_at
            FROM new_rows AS n WHERE n.status IN ('succeeded', 'failed', 'cancelled')
        ), counted AS (
            INSERT INTO job_counts AS c (status, queue, type, shard, n)
            SELECT status, queue, type, pg_backend_pid(), SUM(d) FROM (
                SELECT status, queue, type, 1 AS d FROM moved
                WHERE status IN ('succeeded', 'failed', 'cancelled') AND finished_at IS NOT NULL
                UNION ALL
                SELECT old_status, queue, type, -1 FROM moved
                WHERE old_status IN ('succeeded', 'failed', 'cancelled')
            ) AS d
            GROUP BY status, queue, type ORDER BY status, queue, type
            ON CONFLICT (status, queue, type, shard) DO UPDATE SET n = c.n + EXCLUDED.n
        )  -- a data-modifying WITH runs to completion, referenced or not
        INSERT INTO job_stats_minutely AS m
            (measure, minute, queue, bucket, shard, count, total, maximum)
        SELECT measure, minute, queue, bucket, pg_backend_pid(), COUNT(*), SUM(v), MAX(v)
        FROM (
            SELECT status AS measure, errands_minute(finished_at) AS minute, queue,
                   attempts AS bucket, 0::float8 AS v
            FROM moved
            WHERE status IN ('succeeded', 'failed', 'cancelled') AND finished_at IS NOT NULL
            UNION ALL
            SELECT 'wait', errands_minute(finished_at), queue, errands_bucket(w), w
            FROM (SELECT finished_at, queue,
                         GREATEST(EXTRACT(EPOCH FROM started_at) - EXTRACT(EPOCH FROM run_at),
                                  0)::float8 AS w
                  FROM moved
                  WHERE status IN ('succeeded', 'failed', 'cancelled')
                    AND finished_at IS NOT NULL AND started_at IS NOT NULL) AS waits
        ) AS f
        GROUP BY measure, minute, queue, bucket ORDER BY measure, minute, queue, bucket
        ON CONFLICT (measure, minute, queue, bucket, shard) DO UPDATE SET
            count = m.count + EXCLUDED.count, total = m.total + EXCLUDED.total,
            maximum = GREATEST(m.maximum, EXCLUDED.maximum);
    ELSE
        INSERT INTO job_counts AS c (status, queue, type, shard, n)
        SELECT o.status, o.queue, o.type, pg_backend_pid(), -COUNT(*) FROM old_rows AS o
        WHERE o.status IN ('succeeded', 'failed', 'cancelled')
        GROUP BY o.status, o.queue, o.type ORDER BY o.status, o.queue, o.type
        ON CONFLICT (status, queue, type, shard) DO UPDATE SET n = c.n + EXCLUDED.n;
    END IF;
    RETURN NULL;
END;
$$;

CREATE FUNCTION errands_attempts_changed() RETURNS trigger LANGUAGE plpgsql
    -- The worker's batch transactions forbid sorts, scans and hash/merge joins (stale
    -- statistics after a bulk enqueue, see postgres.py); joining transition tables, which
    -- have no index, needs them back or a batch of n rows costs n² comparisons.
    SET enable_hashjoin = on SET enable_mergejoin = on SET enable_sort = on
    SET enable_seqscan = on SET enable_bitmapscan = on
AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        INSERT INTO job_stats_minutely AS m
            (measure, minute, queue, bucket, shard, count, total, maximum)
        SELECT 'run', minute, queue, errands_bucket(r), pg_backend_pid(), COUNT(*), SUM(r), MAX(r)
        FROM (SELECT errands_minute(n.finished_at) AS minute, j.queue,
                     GREATEST(EXTRACT(EPOCH FROM n.finished_at)
                              - EXTRACT(EPOCH FROM n.started_at), 0)::float8 AS r
              FROM new_rows AS n JOIN old_rows AS o ON o.id = n.id
              JOIN jobs AS j ON j.id = n.job_id
              WHERE o.finished_at IS NULL AND n.finished_at IS NOT NULL
                AND n.status IN ('succeeded', 'failed', 'cancelled')) AS a
        GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4
        ON CONFLICT (measure, minute, queue, bucket, shard) DO UPDATE SET
            count = m.count + EXCLUDED.count, total = m.total + EXCLUDED.total,
            maximum = GREATEST(m.maximum, EXCLUDED.maximum);
    ELSE
        INSERT INTO job_stats_minutely AS m
            (measure, minute, queue, bucket, shard, count, total, maximum)
        SELECT 'run', minute, queue, errands_bucket(r), pg_backend_pid(), COUNT(*), SUM(r), MAX(r)
        FROM (SELECT errands_minute(n.finished_at) AS minute, j.queue,
                     GREATEST(EXTRACT(EPOCH FROM n.finished_at)
                              - EXTRACT(EPOCH FROM n.started_at), 0)::float8 AS r
              FROM new_rows AS n JOIN jobs AS j ON j.id = n.job_id
              WHERE n.finished_at IS NOT NULL
                AND n.status IN ('succeeded', 'failed', 'cancelled')) AS a
        GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4
        ON CONFLICT (measure, minute, queue, bucket, shard) DO UPDATE SET
            count = m.count + EXCLUDED.count, total = m.total + EXCLUDED.total,
            maximum = GREATEST(m.maximum, EXCLUDED.maximum);
    END IF;
    RETURN NULL;
END;
$$;

-- Transition tables rule out column lists (UPDATE OF status) and WHEN: every UPDATE statement
-- on jobs calls the function, which finds nothing to do unless a row entered or left a final
-- state (a claim or heartbeat: one small join of its own rows).
CREATE TRIGGER jobs_finished_insert AFTER INSERT ON jobs
REFERENCING NEW TABLE AS new_rows
FOR EACH STATEMENT EXECUTE FUNCTION errands_jobs_changed();

CREATE TRIGGER jobs_finished_update AFTER UPDATE ON jobs
REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
FOR EACH STATEMENT EXECUTE FUNCTION errands_jobs_changed();

CREATE TRIGGER jobs_finished_delete AFTER DELETE ON jobs
REFERENCING OLD TABLE AS old_rows
FOR EACH STATEMENT EXECUTE FUNCTION errands_jobs_changed();

CREATE TRIGGER job_attempts_finished_update AFTER UPDATE ON job_attempts
REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
FOR EACH STATEMENT EXECUTE FUNCTION errands_attempts_changed();

CREATE TRIGGER job_attempts_finished_insert AFTER INSERT ON job_attempts
REFERENCING NEW TABLE AS new_rows
FOR EACH STATEMENT EXECUTE FUNCTION errands_attempts_changed();

-- What is already in the tables: every finished job's count, and the last 8 days' figures.
INSERT INTO job_counts (status, queue, type, shard, n)
SELECT status, queue, type, 0, COUNT(*) FROM jobs
WHERE status IN ('succeeded', 'failed', 'cancelled') AND finished_at IS NOT NULL
GROUP BY status, queue, type;

INSERT INTO job_stats_minutely (measure, minute, queue, bucket, shard, count)
SELECT status, errands_minute(finished_at), queue, attempts, 0, COUNT(*)
FROM jobs
WHERE status IN ('succeeded', 'failed', 'cancelled')
  AND finished_at >= now() - interval '8 days'
GROUP BY 1, 2, 3, 4;

INSERT INTO job_stats_minutely (measure, minute, queue, bucket, shard, count, total, maximum)
SELECT 'wait', m, queue, errands_bucket(v), 0, COUNT(*), SUM(v), MAX(v)
FROM (SELECT errands_minute(finished_at) AS m, queue,
             GREATEST(EXTRACT(EPOCH FROM started_at) - EXTRACT(EPOCH FROM run_at), 0)::float8 AS v
      FROM jobs
      WHERE status IN ('succeeded', 'failed', 'cancelled') AND started_at IS NOT NULL
        AND finished_at >= now() - interval '8 days') AS f
GROUP BY 1, 2, 3, 4;

INSERT INTO job_stats_minutely (measure, minute, queue, bucket, shard, count, total, maximum)
SELECT 'run', m, queue, errands_bucket(v), 0, COUNT(*), SUM(v), MAX(v)
FROM (SELECT errands_minute(a.finished_at) AS m, j.queue,
             GREATEST(EXTRACT(EPOCH FROM a.finished_at)
                      - EXTRACT(EPOCH FROM a.started_at), 0)::float8 AS v
      FROM job_attempts AS a JOIN jobs AS j ON j.id = a.job_id
      WHERE a.status IN ('succeeded', 'failed', 'cancelled') AND a.finished_at IS NOT NULL
        AND a.finished_at >= now() - interval '8 days') AS f
GROUP BY 1, 2, 3, 4;
