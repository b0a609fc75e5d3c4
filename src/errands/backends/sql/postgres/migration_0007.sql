-- errands schema version 7 (PostgreSQL): one truth across processes (issue #21), as
-- sql/sqlite/migration_0007.sql says. IF NOT EXISTS throughout: a test (and an older
-- graduate's target) may apply it again over a schema that has it.

-- task_types: each task type's options, recorded by the worker that runs it when it starts.
CREATE TABLE IF NOT EXISTS task_types (
    type            text             PRIMARY KEY,
    queue           text             NOT NULL DEFAULT 'default',
    priority        integer          NOT NULL DEFAULT 0,
    max_attempts    integer          NOT NULL DEFAULT 20 CHECK (max_attempts >= 1),
    timeout_seconds double precision,
    options         jsonb            NOT NULL DEFAULT '{}',
    declared_by     text,
    declared_at     timestamptz      NOT NULL
);

-- errands_meta: facts about this database as a whole ('graduated_to' is written only on a
-- SQLite source; the table is here so both schemas stay alike).
CREATE TABLE IF NOT EXISTS errands_meta (
    key        text        PRIMARY KEY,
    value      text        NOT NULL,
    updated_at timestamptz NOT NULL
);

-- The schedules each worker declares (NULL: an older errands that did not say).
ALTER TABLE workers ADD COLUMN IF NOT EXISTS schedules text;

-- When a schedule first enqueued a job (overdue is measured from it until a first success).
ALTER TABLE periodic ADD COLUMN IF NOT EXISTS first_enqueued_at timestamptz;
UPDATE periodic SET first_enqueued_at = COALESCE(
    (SELECT MIN(j.created_at) FROM jobs j WHERE j.type = periodic.type), last_enqueued_at)
WHERE last_enqueued_at IS NOT NULL AND first_enqueued_at IS NULL;
