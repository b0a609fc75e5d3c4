-- errands schema version 10 (PostgreSQL): an operator can disable a periodic schedule (issue
-- #25). The same as sql/sqlite/migration_0010.sql.
-- disabled_at/disabled_by: when and by whom (NULL: enabled); the scheduler enqueues no tick
-- of a disabled schedule, and check and stats do not call it overdue. enabled_at: when it was
-- last enabled again, so the ticks it skipped while disabled are never owed (overdue).
ALTER TABLE periodic ADD COLUMN IF NOT EXISTS disabled_at timestamptz;
ALTER TABLE periodic ADD COLUMN IF NOT EXISTS disabled_by text;
ALTER TABLE periodic ADD COLUMN IF NOT EXISTS enabled_at timestamptz;
