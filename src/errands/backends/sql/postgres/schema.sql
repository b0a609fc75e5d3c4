-- Schema bookkeeping for the PostgreSQL backend (same names in the SQLite dialect).
-- Tables are looked up in current_schema(), so errands can live in its own schema
-- (search_path) beside the application's tables.

-- name: schema_table_exists
-- Whether errands has created its migrations table here.
SELECT 1 AS present FROM pg_tables WHERE schemaname = current_schema() AND tablename = 'errands_migrations';

-- name: conflicting_objects
-- Relations (tables, views, indexes, sequences) and functions in current_schema() already holding a name
-- errands' migrations create (:names, an array).
SELECT CASE c.relkind WHEN 'r' THEN 'table' WHEN 'p' THEN 'table' WHEN 'v' THEN 'view'
                      WHEN 'm' THEN 'materialized view' WHEN 'i' THEN 'index'
                      WHEN 'S' THEN 'sequence' ELSE 'relation' END AS kind,
       c.relname AS name
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = current_schema() AND c.relname::text = ANY(:names)
UNION ALL
SELECT 'function', p.proname
FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
WHERE n.nspname = current_schema() AND p.proname::text = ANY(:names)
ORDER BY 2;

-- name: create_schema_table
-- The migrations table: one row per applied schema version.
CREATE TABLE errands_migrations (version integer PRIMARY KEY, applied_at timestamptz NOT NULL);

-- name: schema_version
-- The newest applied schema version (0 for a new database).
SELECT COALESCE(MAX(version), 0) AS version FROM errands_migrations;

-- name: record_migration
-- Record an applied schema version.
INSERT INTO errands_migrations (version, applied_at) VALUES (:version, to_timestamp(:now));

-- name: installations
-- Tables in current_schema() that may be an errands migrations table, under any table
-- prefix (prefix.py picks the ones that are).
SELECT tablename AS name FROM pg_tables
WHERE schemaname = current_schema() AND tablename LIKE '%errands\_migrations' ESCAPE '\';
