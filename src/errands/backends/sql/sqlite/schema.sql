-- Schema bookkeeping for the SQLite backend (same names in the PostgreSQL dialect).

-- name: schema_table_exists
-- Whether errands has created its migrations table here.
SELECT 1 AS present FROM sqlite_master WHERE type = 'table' AND name = 'errands_migrations';

-- name: conflicting_objects
-- Objects (tables, views, indexes, triggers) already holding a name errands' migrations create
-- (:names, a JSON array); SQLite names are case-insensitive, so 'Jobs' conflicts with 'jobs'.
SELECT type AS kind, name FROM sqlite_master
WHERE lower(name) IN (SELECT value FROM json_each(:names))
ORDER BY name;

-- name: create_schema_table
-- The migrations table: one row per applied schema version.
CREATE TABLE errands_migrations (version INTEGER PRIMARY KEY, applied_at REAL NOT NULL);

-- name: schema_version
-- The newest applied schema version (0 for a new database).
SELECT COALESCE(MAX(version), 0) AS version FROM errands_migrations;

-- name: record_migration
-- Record an applied schema version.
INSERT INTO errands_migrations (version, applied_at) VALUES (:version, :now);

-- name: installations
-- Tables that may be an errands migrations table, under any table prefix (prefix.py picks
-- the ones that are).
SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE '%errands\_migrations' ESCAPE '\';
