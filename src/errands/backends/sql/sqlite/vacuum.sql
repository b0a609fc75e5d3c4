-- Dead tuples and the xmin horizon (backends/vacuum.py) for SQLite: the same names,
-- parameters and result columns as sql/postgres/vacuum.sql. SQLite keeps no dead tuples
-- (a deleted row's space goes back to the file's free pages at once) and has no xmin horizon
-- (a long reader holds the WAL instead: maintenance/wal.py), so the reads return no rows and
-- the vacuum of one table only refreshes its planner statistics.

-- name: table_health
-- No rows: SQLite keeps no per-table dead tuples. (:tables is accepted and unused.)
SELECT NULL AS table_name, NULL AS live_tuples, NULL AS dead_tuples, NULL AS last_vacuum_at,
       NULL AS last_autovacuum_at, NULL AS autovacuum_on, NULL AS bytes
WHERE :tables IS NULL AND 0;

-- name: horizon_holders
-- No rows: SQLite has no xmin horizon. (:limit is accepted and unused.)
SELECT NULL AS kind, NULL AS name, NULL AS pid, NULL AS application_name, NULL AS client_addr,
       NULL AS started_at, NULL AS query_start, NULL AS state, NULL AS query, NULL AS xid_age
WHERE :limit IS NULL AND 0;

-- name: vacuum_table
-- Refreshes one table's statistics ({table}: one of errands' own names, quoted by the caller).
ANALYZE {table};

-- name: vacuum_leader
-- The worker that holds the vacuum service's lease now, if any: errands' own vacuum runs.
SELECT holder FROM maintenance_leases WHERE name = 'vacuum' AND expires_at > :now;
