-- errands schema version 5 (SQLite): errands graduate's bookkeeping.
-- errands_graduation: one row per SQLite source (its real path) that `errands graduate` is
-- filling, or has filled, this database from, so a rerun into a half-filled target resumes
-- instead of being refused as "not empty". Only a PostgreSQL target writes it; the table is
-- in both dialects so their schemas stay alike.
CREATE TABLE errands_graduation (
    source      TEXT PRIMARY KEY,
    started_at  REAL NOT NULL,
    finished_at REAL
);
