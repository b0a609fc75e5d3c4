-- Queries of `errands graduate` (errands/cli/graduate/), which copies a SQLite queue into
-- PostgreSQL: the source reads table_columns; the rest run on the target, and are here too
-- so both dialects keep the same names.

-- name: table_columns
-- The columns of one errands table, in their declared order, with their declared types.
SELECT name AS column_name, type AS data_type FROM pragma_table_info(:table) ORDER BY cid;

-- name: graduation_of
-- The bookkeeping row of a graduation from :source, if one was started here.
SELECT finished_at FROM errands_graduation WHERE source = :source;

-- name: start_graduation
-- Remember that this database is being filled from :source (kept if already there).
INSERT INTO errands_graduation (source, started_at) VALUES (:source, :now)
ON CONFLICT (source) DO NOTHING;

-- name: finish_graduation
-- A graduation from :source copied and verified everything.
UPDATE errands_graduation SET finished_at = :now WHERE source = :source;

-- name: advance_identities
-- Nothing to do: SQLite's AUTOINCREMENT already follows the largest id ever inserted.
SELECT 0 AS advanced WHERE 0;
