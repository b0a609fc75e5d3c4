-- errands schema version 9 (PostgreSQL): dependencies (issue #24, docs/pipelines.md). A job enqueued
-- after=[…] is 'waiting' until every job it depends on is final; job_deps holds the edges.
-- The same as sql/sqlite/migration_0009.sql; PostgreSQL changes a CHECK in place.
ALTER TABLE jobs DROP CONSTRAINT IF EXISTS jobs_status_check;
ALTER TABLE jobs ADD CONSTRAINT jobs_status_check
    CHECK (status IN ('waiting', 'queued', 'running', 'succeeded', 'failed', 'cancelled'));
-- Waiting jobs per queue and type (counts), and the sweeper's and check's walk over them.
CREATE INDEX IF NOT EXISTS jobs_waiting ON jobs (queue, type) WHERE status = 'waiting';

-- One row per edge: job_id runs after upstream_id. upstream_status is NULL while the
-- upstream is not final and the final state it reached once it is, written in the
-- transaction that made it final: a dependent is ready when none of its edges is open.
-- on_failure is the dependent's on_upstream_failure ('cancel': an upstream that did not
-- succeed cancels it; 'run': it runs whatever the outcome).
CREATE TABLE IF NOT EXISTS job_deps (
    job_id          bigint NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    upstream_id     bigint NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    on_failure      text   NOT NULL DEFAULT 'cancel' CHECK (on_failure IN ('cancel', 'run')),
    upstream_status text,
    PRIMARY KEY (job_id, upstream_id)
);
-- The release probe (an upstream became final: which edges does it close?), a job's
-- downstream, and prune's "does a waiting job still depend on it?".
CREATE INDEX IF NOT EXISTS job_deps_upstream ON job_deps (upstream_id);
-- "Has this dependent an open edge left?": one index probe, however many upstreams it has
-- (a callback after 10,000 members), so a release never scans the finished ones.
CREATE INDEX IF NOT EXISTS job_deps_open ON job_deps (job_id) WHERE upstream_status IS NULL;
