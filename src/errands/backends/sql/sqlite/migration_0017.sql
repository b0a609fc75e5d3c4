-- errands schema version 17 (SQLite): the deadline time rule (issue #34, docs/flow-control.md).
-- deadline_at: created_at + the job's deadline (NULL: none); no attempt starts at or after
-- it. The claim never starts such a job, a retry or a sleep that would wake past it fails the
-- job at once (DEADLINE:EXCEEDED), the expiry service fails the queued ones left, and a
-- manual retry clears it.
ALTER TABLE jobs ADD COLUMN deadline_at REAL;
CREATE INDEX IF NOT EXISTS jobs_deadline ON jobs (deadline_at)
    WHERE status = 'queued' AND deadline_at IS NOT NULL;
