-- errands schema version 3 (SQLite): job headers.
-- jobs.headers: a small JSON object stored with the job by enqueue middleware (for example the
-- W3C trace context, "traceparent"), handed back to execution middleware on every attempt.
-- NULL when no middleware wrote any. Nullable with no default, so the ALTER is instant.
ALTER TABLE jobs ADD COLUMN headers TEXT;
