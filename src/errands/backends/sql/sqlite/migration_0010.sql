-- errands schema version 10 (SQLite): an operator can disable a periodic schedule (issue #25).
-- disabled_at/disabled_by: when and by whom (NULL: enabled); the scheduler enqueues no tick
-- of a disabled schedule, and check and stats do not call it overdue. enabled_at: when it was
-- last enabled again, so the ticks it skipped while disabled are never owed (overdue).
ALTER TABLE periodic ADD COLUMN disabled_at REAL;
ALTER TABLE periodic ADD COLUMN disabled_by TEXT;
ALTER TABLE periodic ADD COLUMN enabled_at REAL;
