-- errands_meta (migration 7): facts about this database as a whole, one row per key.
-- Same names in both dialects; only a SQLite source is ever marked 'graduated_to'.

-- name: set_meta
-- Set a fact about this database (errands_meta).
INSERT INTO errands_meta (key, value, updated_at) VALUES (:key, :value, to_timestamp(:now))
ON CONFLICT (key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at;

-- name: get_meta
-- One fact about this database, or no row.
SELECT value, updated_at FROM errands_meta WHERE key = :key;

-- name: delete_meta
-- Forget a fact about this database.
DELETE FROM errands_meta WHERE key = :key
RETURNING key;
