-- errands schema version 4 (PostgreSQL): a worker's batch of outcomes counts its own figures,
-- as sql/sqlite/migration_0004.sql. The statement-level trigger functions of migration 0002
-- cost the worker's hot path a third of its throughput (issue #14; they run for claims too, to
-- find nothing). The worker's claim and outcome transactions now set errands.figures_counted_
-- by_batch for the transaction (postgres.py: _BATCH_TRANSACTION), the functions return at once
-- when it is set, and the outcome transaction counts its batch with one grouped upsert per
-- figure table (jobs.sql: count_batch_jobs, count_batch_minutes), the same formulas. A claim
-- changes no figure. Every other path — cancel, rescue, retry, prune, graduate, complete_in,
-- an UPDATE of the application's — is still counted by the triggers.

-- SQLite's mark (a row that exists only inside a worker's batch transaction). PostgreSQL marks
-- the transaction with a setting instead and keeps this table empty: it is here so both
-- dialects hold the same schema (tests/test_schema_parity.py).
CREATE TABLE figures_counted_by_batch (
    id bigint PRIMARY KEY
);

-- Per minute, error code and type: jobs that reached a final state carrying an error code, as
-- sql/sqlite/migration_0004.sql (what `top_errors` reads for the finished part of its window),
-- taken off again when a job leaves its final state or is deleted; one shard per backend.
CREATE TABLE job_errors_minutely (
    minute           timestamptz NOT NULL,
    error_code       text        NOT NULL,
    type             text        NOT NULL,
    shard            integer     NOT NULL DEFAULT 0,
    count            bigint      NOT NULL DEFAULT 0,
    last_finished_at timestamptz,
    PRIMARY KEY (minute, error_code, type, shard)
);

CREATE INDEX jobs_errors_unfinished ON jobs (error_code, type)
WHERE error_code IS NOT NULL AND finished_at IS NULL;

-- The histogram bucket of a value (COUNT of bounds below it, in the triggers and the batch's
-- queries) as a range of an index instead of a scan of the bounds for every value counted:
-- measured 2 us less per finished job on SQLite.
CREATE INDEX job_stats_bounds_upper ON job_stats_bounds (upper);

CREATE OR REPLACE FUNCTION errands_jobs_changed() RETURNS trigger LANGUAGE plpgsql
    -- The worker's batch transactions forbid sorts, scans and hash/merge joins (stale
    -- statistics after a bulk enqueue, see postgres.py); joining transition tables, which
    -- have no index, needs them back or a batch of n rows costs n² comparisons.
    SET enable_hashjoin = on SET enable_mergejoin = on SET enable_sort = on
    SET enable_seqscan = on SET enable_bitmapscan = on
AS $$
BEGIN
    -- A worker's batch transaction counts its own rows (jobs.sql: count_batch_jobs,
    -- count_batch_minutes) and says so here, transaction-local.
    IF current_setting('errands.figures_counted_by_batch', true) = 'on' THEN
        RETURN NULL;
    END IF;
    IF TG_OP = 'UPDATE' THEN
        WITH moved AS (
            SELECT o.status AS old_status, n.status, n.queue, n.type, n.attempts, n.run_at,
                   n.started_at, n.finished_at, n.error_code, o.type AS old_type,
                   o.error_code AS old_error_code, o.finished_at AS old_finished_at
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
        ), errors_counted AS (
            INSERT INTO job_errors_minutely AS e
                (minute, error_code, type, shard, count, last_finished_at)
            SELECT minute, error_code, type, pg_backend_pid(), SUM(d), MAX(last_finished_at)
            FROM (
                SELECT errands_minute(finished_at) AS minute, error_code, type, 1 AS d,
                       finished_at AS last_finished_at
                FROM moved
                WHERE status IN ('succeeded', 'failed', 'cancelled') AND finished_at IS NOT NULL
                  AND error_code IS NOT NULL
                UNION ALL
                SELECT errands_minute(old_finished_at), old_error_code, old_type, -1, NULL
                FROM moved
                WHERE old_status IN ('succeeded', 'failed', 'cancelled')
                  AND old_finished_at IS NOT NULL AND old_error_code IS NOT NULL
            ) AS d
            GROUP BY minute, error_code, type ORDER BY minute, error_code, type
            ON CONFLICT (minute, error_code, type, shard) DO UPDATE SET
                count = e.count + EXCLUDED.count,
                last_finished_at = GREATEST(e.last_finished_at, EXCLUDED.last_finished_at)
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
                   n.started_at, n.finished_at, n.error_code, NULL::text AS old_type,
                   NULL::text AS old_error_code, NULL::timestamptz AS old_finished_at
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
        ), errors_counted AS (
            INSERT INTO job_errors_minutely AS e
                (minute, error_code, type, shard, count, last_finished_at)
            SELECT minute, error_code, type, pg_backend_pid(), SUM(d), MAX(last_finished_at)
            FROM (
                SELECT errands_minute(finished_at) AS minute, error_code, type, 1 AS d,
                       finished_at AS last_finished_at
                FROM moved
                WHERE status IN ('succeeded', 'failed', 'cancelled') AND finished_at IS NOT NULL
                  AND error_code IS NOT NULL
                UNION ALL
                SELECT errands_minute(old_finished_at), old_error_code, old_type, -1, NULL
                FROM moved
                WHERE old_status IN ('succeeded', 'failed', 'cancelled')
                  AND old_finished_at IS NOT NULL AND old_error_code IS NOT NULL
            ) AS d
            GROUP BY minute, error_code, type ORDER BY minute, error_code, type
            ON CONFLICT (minute, error_code, type, shard) DO UPDATE SET
                count = e.count + EXCLUDED.count,
                last_finished_at = GREATEST(e.last_finished_at, EXCLUDED.last_finished_at)
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
        WITH errors_forgotten AS (
            INSERT INTO job_errors_minutely AS e (minute, error_code, type, shard, count)
            SELECT errands_minute(o.finished_at), o.error_code, o.type, pg_backend_pid(),
                   -COUNT(*)
            FROM old_rows AS o
            WHERE o.status IN ('succeeded', 'failed', 'cancelled')
              AND o.finished_at IS NOT NULL AND o.error_code IS NOT NULL
            GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
            ON CONFLICT (minute, error_code, type, shard) DO UPDATE SET
                count = e.count + EXCLUDED.count
        )
        INSERT INTO job_counts AS c (status, queue, type, shard, n)
        SELECT o.status, o.queue, o.type, pg_backend_pid(), -COUNT(*) FROM old_rows AS o
        WHERE o.status IN ('succeeded', 'failed', 'cancelled')
        GROUP BY o.status, o.queue, o.type ORDER BY o.status, o.queue, o.type
        ON CONFLICT (status, queue, type, shard) DO UPDATE SET n = c.n + EXCLUDED.n;
    END IF;
    RETURN NULL;
END;
$$;

CREATE OR REPLACE FUNCTION errands_attempts_changed() RETURNS trigger LANGUAGE plpgsql
    -- The worker's batch transactions forbid sorts, scans and hash/merge joins (stale
    -- statistics after a bulk enqueue, see postgres.py); joining transition tables, which
    -- have no index, needs them back or a batch of n rows costs n² comparisons.
    SET enable_hashjoin = on SET enable_mergejoin = on SET enable_sort = on
    SET enable_seqscan = on SET enable_bitmapscan = on
AS $$
BEGIN
    -- A worker's batch transaction counts its own rows (jobs.sql: count_batch_jobs,
    -- count_batch_minutes) and says so here, transaction-local.
    IF current_setting('errands.figures_counted_by_batch', true) = 'on' THEN
        RETURN NULL;
    END IF;
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

-- What is already in the tables: the last 8 days' errored jobs.
INSERT INTO job_errors_minutely (minute, error_code, type, shard, count, last_finished_at)
SELECT errands_minute(finished_at), error_code, type, 0, COUNT(*), MAX(finished_at)
FROM jobs
WHERE status IN ('succeeded', 'failed', 'cancelled') AND error_code IS NOT NULL
  AND finished_at >= now() - interval '8 days'
GROUP BY 1, 2, 3;
