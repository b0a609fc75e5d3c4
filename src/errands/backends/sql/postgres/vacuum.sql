-- Dead tuples and the xmin horizon (backends/vacuum.py) for PostgreSQL: the same names,
-- parameters and result columns as sql/sqlite/vacuum.sql. Every row a claim or an outcome
-- replaces stays behind as a dead tuple until VACUUM reclaims it, and VACUUM reclaims only
-- what no open snapshot can still see: these reads say how many are waiting, who holds them,
-- and whether the server's autovacuum looks after errands' tables at all.

-- name: table_health
-- Per errands table (:tables, the names with the installation's prefix, in the schema the
-- tables were created in): live and dead tuples, the last vacuum of either kind, whether
-- autovacuum runs on it (the server's switch and the table's own autovacuum_enabled), and
-- its size. The counts come from the statistics collector: they trail by about a second.
SELECT s.relname AS table_name, s.n_live_tup AS live_tuples, s.n_dead_tup AS dead_tuples,
       GREATEST(s.last_vacuum, s.last_autovacuum) AS last_vacuum_at,
       s.last_autovacuum AS last_autovacuum_at,
       (current_setting('autovacuum') = 'on' AND NOT EXISTS (
            SELECT 1 FROM pg_options_to_table(c.reloptions) AS o
            WHERE o.option_name = 'autovacuum_enabled'
              AND lower(o.option_value) IN ('false', 'off', 'no', '0', 'f', 'n', 'of')
       )) AS autovacuum_on,
       pg_total_relation_size(s.relid) AS bytes
FROM pg_stat_user_tables AS s JOIN pg_class AS c ON c.oid = s.relid
WHERE s.schemaname = current_schema() AND s.relname = ANY(:tables)
ORDER BY s.n_dead_tup DESC, s.relname;

-- name: horizon_holders
-- What holds this database's xmin horizon, oldest first: open transactions (their snapshot
-- or their own id; a standby's hot_standby_feedback shows as its walsender), replication
-- slots (xmin; catalog_xmin holds only the system catalogs) and prepared transactions. Other
-- databases' transactions do not hold back VACUUM here; slots do, whatever their database.
-- xid_age: transactions since the held one (age()); started_at: when it began (NULL for a
-- slot, which keeps no time).
SELECT kind, name, pid, application_name, client_addr, started_at, query_start, state,
       query, xid_age
FROM (
    SELECT CASE WHEN a.backend_type = 'walsender' THEN 'standby feedback'
                ELSE 'transaction' END AS kind,
           NULL::text AS name, a.pid, a.application_name, host(a.client_addr) AS client_addr,
           a.xact_start AS started_at, a.query_start, a.state, left(a.query, 200) AS query,
           GREATEST(age(a.backend_xmin), age(a.backend_xid)) AS xid_age
    FROM pg_stat_activity AS a
    WHERE a.pid <> pg_backend_pid()
      AND (a.datname = current_database() OR a.backend_type = 'walsender')
      AND (a.backend_xmin IS NOT NULL OR a.backend_xid IS NOT NULL)
    UNION ALL
    SELECT 'replication slot', r.slot_name::text, r.active_pid, sa.application_name,
           host(sa.client_addr), NULL, NULL, CASE WHEN r.active THEN 'active' ELSE 'inactive' END,
           NULL, age(r.xmin)
    FROM pg_replication_slots AS r LEFT JOIN pg_stat_activity AS sa ON sa.pid = r.active_pid
    WHERE r.xmin IS NOT NULL AND (r.database IS NULL OR r.database = current_database())
    UNION ALL
    SELECT 'prepared transaction', p.gid, NULL, NULL, NULL, p.prepared, NULL, 'prepared',
           NULL, age(p.transaction)
    FROM pg_prepared_xacts AS p
    WHERE p.database = current_database()
) AS held
ORDER BY xid_age DESC NULLS LAST, started_at NULLS LAST
LIMIT :limit;

-- name: vacuum_table
-- Reclaims one table's dead tuples (not FULL: no exclusive lock, readers and writers go on)
-- and refreshes its planner statistics. {table} is one of errands' own table names, quoted
-- by the caller (backends/vacuum.py), never a user's string; it runs outside a transaction
-- block, as VACUUM must.
VACUUM (ANALYZE) {table};

-- name: vacuum_leader
-- The worker that holds the vacuum service's lease now, if any: errands' own vacuum runs.
SELECT holder FROM maintenance_leases
WHERE name = 'vacuum' AND expires_at > to_timestamp(:now);
