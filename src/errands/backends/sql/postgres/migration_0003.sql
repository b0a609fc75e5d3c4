-- errands schema version 3 (PostgreSQL): job headers, as sql/sqlite/migration_0003.sql.
-- jobs.headers: a small JSON object stored with the job by enqueue middleware (for example the
-- W3C trace context, "traceparent"), handed back to execution middleware on every attempt.
-- NULL when no middleware wrote any. Nullable with no default: a catalog-only change.
ALTER TABLE jobs ADD COLUMN headers jsonb;
