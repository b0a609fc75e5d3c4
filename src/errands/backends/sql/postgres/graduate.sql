-- Queries of `errands graduate` (errands/cli/graduate/), which copies a SQLite queue into
-- PostgreSQL: the source reads table_columns; the rest run on the target, and are in the
-- SQLite file too so both dialects keep the same names.

-- name: table_columns
-- The columns of one errands table, in their declared order, with their types.
SELECT column_name::text AS column_name, data_type::text AS data_type
FROM information_schema.columns
WHERE table_schema = current_schema() AND table_name = :table
ORDER BY ordinal_position;

-- name: graduation_of
-- The bookkeeping row of a graduation from :source, if one was started here.
SELECT finished_at FROM errands_graduation WHERE source = :source;

-- name: start_graduation
-- Remember that this database is being filled from :source (kept if already there).
INSERT INTO errands_graduation (source, started_at) VALUES (:source, to_timestamp(:now))
ON CONFLICT (source) DO NOTHING;

-- name: finish_graduation
-- A graduation from :source copied and verified everything.
UPDATE errands_graduation SET finished_at = to_timestamp(:now) WHERE source = :source;

-- name: advance_identities
-- The identity sequences past the copied ids, so new rows never reuse one (never backwards).
SELECT setval(pg_get_serial_sequence('jobs', 'id'), m) AS advanced FROM
    (SELECT GREATEST(max(id), COALESCE(pg_sequence_last_value(
         pg_get_serial_sequence('jobs', 'id')::regclass), 0)) AS m FROM jobs) s
WHERE m IS NOT NULL AND m > 0
UNION ALL
SELECT setval(pg_get_serial_sequence('job_attempts', 'id'), m) FROM
    (SELECT GREATEST(max(id), COALESCE(pg_sequence_last_value(
         pg_get_serial_sequence('job_attempts', 'id')::regclass), 0)) AS m FROM job_attempts) s
WHERE m IS NOT NULL AND m > 0
UNION ALL
SELECT setval(pg_get_serial_sequence('job_events', 'id'), m) FROM
    (SELECT GREATEST(max(id), COALESCE(pg_sequence_last_value(
         pg_get_serial_sequence('job_events', 'id')::regclass), 0)) AS m FROM job_events) s
WHERE m IS NOT NULL AND m > 0
UNION ALL
SELECT setval(pg_get_serial_sequence('job_blobs', 'id'), m) FROM
    (SELECT GREATEST(max(id), COALESCE(pg_sequence_last_value(
         pg_get_serial_sequence('job_blobs', 'id')::regclass), 0)) AS m FROM job_blobs) s
WHERE m IS NOT NULL AND m > 0
UNION ALL
SELECT setval(pg_get_serial_sequence('job_signals', 'id'), m) FROM
    (SELECT GREATEST(max(id), COALESCE(pg_sequence_last_value(
         pg_get_serial_sequence('job_signals', 'id')::regclass), 0)) AS m FROM job_signals) s
WHERE m IS NOT NULL AND m > 0
UNION ALL
SELECT setval(pg_get_serial_sequence('operator_actions', 'id'), m) FROM
    (SELECT GREATEST(max(id), COALESCE(pg_sequence_last_value(
         pg_get_serial_sequence('operator_actions', 'id')::regclass), 0)) AS m
     FROM operator_actions) s
WHERE m IS NOT NULL AND m > 0;
