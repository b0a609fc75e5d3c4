-- errands schema version 14 (SQLite): nothing to change. On PostgreSQL this version gives
-- the tables every job rewrites their storage settings (fillfactor, autovacuum thresholds);
-- SQLite keeps no dead tuples (a row's old version goes back to the file's free pages at
-- once), so it has no such settings. The version stays the same on both dialects.
SELECT 1;
