-- SQLite's own statements: text an older errands stored that is not UTF-8
-- (backends/sqlite_text.py). PostgreSQL never stores such text, so it has no counterpart.

-- name: limit_group_bytes
-- Every distinct limit group as its stored bytes (a BLOB is never decoded, so this read
-- cannot fail on the text it looks for). Run only after a claim failed to decode.
SELECT DISTINCT CAST(limit_group AS BLOB) AS raw FROM jobs WHERE limit_group IS NOT NULL
UNION
SELECT DISTINCT CAST(grp AS BLOB) AS raw FROM limit_starts;

-- name: mend_limit_group
-- One undecodable group rewritten as its decoded text (U+FFFD for each bad byte), in the
-- jobs and in the rate windows alike so the group keeps its starts.
UPDATE jobs SET limit_group = :fixed WHERE CAST(limit_group AS BLOB) = :raw;

-- name: mend_limit_starts_group
UPDATE limit_starts SET grp = :fixed WHERE CAST(grp AS BLOB) = :raw;
