-- errands schema version 5 (PostgreSQL): errands graduate's bookkeeping.
-- errands_graduation: one row per SQLite source (its real path) that `errands graduate` is
-- filling, or has filled, this database from, so a rerun into a half-filled target resumes
-- instead of being refused as "not empty". IF NOT EXISTS: before version 5, graduate created
-- this same table itself, outside the migrations.
CREATE TABLE IF NOT EXISTS errands_graduation (
    source      text PRIMARY KEY,
    started_at  timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz
);
