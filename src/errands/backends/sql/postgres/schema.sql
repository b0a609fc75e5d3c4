-- Schema bookkeeping for the PostgreSQL backend (same names in the SQLite dialect).
-- Tables are looked up in current_schema(), so errands can live in its own schema
-- (search_path) beside the application's tables.

-- name: schema_table_exists
-- Whether errands has created its migrations table here.
SELECT 1 AS present FROM pg_tables WHERE schemaname = current_schema() AND tablename = 'errands_migrations';

-- name: jobs_table_exists
-- Whether some other 'jobs' table already exists (not ours: refuse to touch it).
SELECT 1 AS present FROM pg_tables WHERE schemaname = current_schema() AND tablename = 'jobs';

-- name: create_schema_table
-- The migrations table: one row per applied schema version.
CREATE TABLE errands_migrations (version integer PRIMARY KEY, applied_at timestamptz NOT NULL);

-- name: schema_version
-- The newest applied schema version (0 for a new database).
SELECT COALESCE(MAX(version), 0) AS version FROM errands_migrations;

-- name: record_migration
-- Record an applied schema version.
INSERT INTO errands_migrations (version, applied_at) VALUES (:version, to_timestamp(:now));
