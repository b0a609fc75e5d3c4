-- errands schema version 15 (SQLite): fair share (issue #34, docs/flow-control.md). The same
-- tables as sql/postgres/migration_0015.sql.

-- Per fair key and value, its virtual start tag: the claim serves the eligible value with the
-- smallest tag and raises it by 1/weight per start (start-time fair queuing). A missing row,
-- or a tag behind the key's clock, stands for the clock itself: so a value idle, capped or
-- paused banks no credit, and rows behind the clock can be dropped at any time.
CREATE TABLE IF NOT EXISTS fair_turns (
    key   TEXT NOT NULL,
    value TEXT NOT NULL,
    tag   REAL NOT NULL,
    PRIMARY KEY (key, value)
);

-- Per fair key, its virtual time: the largest start tag served so far (it only grows).
CREATE TABLE IF NOT EXISTS fair_clocks (
    key   TEXT PRIMARY KEY,
    vtime REAL NOT NULL
);
