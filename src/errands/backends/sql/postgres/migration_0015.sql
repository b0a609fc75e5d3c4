-- errands schema version 15 (PostgreSQL): fair share (issue #34, docs/flow-control.md). The
-- same tables as sql/sqlite/migration_0015.sql (see there).
CREATE TABLE IF NOT EXISTS fair_turns (
    key   text             NOT NULL,
    value text             NOT NULL,
    tag   double precision NOT NULL,
    PRIMARY KEY (key, value)
);

CREATE TABLE IF NOT EXISTS fair_clocks (
    key   text             PRIMARY KEY,
    vtime double precision NOT NULL
);
