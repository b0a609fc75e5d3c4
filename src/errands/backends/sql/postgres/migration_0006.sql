-- errands schema version 6 (PostgreSQL): fewer index entries written per job (issue #12), as
-- sql/sqlite/migration_0006.sql. jobs_status_queue_type, a full index on (status, queue, type)
-- that every claim and outcome wrote twice (old entry out, new one in), goes; its queued and
-- running halves live in the partial indexes those states already keep, widened to cover
-- queue and type. Finished jobs are found through jobs_finished (status, finished_at) and
-- counted from job_counts. Queries on a state bound as a parameter cannot use a partial index
-- in a generic plan (psycopg prepares a statement after a few runs): each such query has a
-- literal variant per index (ops.sql: ids_matching_queued, …). The two indexes are rebuilt in
-- the migration's transaction: a scan of jobs, writes wait for it (their entries are the
-- active jobs only).

DROP INDEX IF EXISTS jobs_status_queue_type;

-- "Oldest due queued job" (in its ORDER BY run_at, id), the worker's next wake-up (a range on
-- run_at over queued rows, its type filter read from the index), queued jobs per queue and type.
DROP INDEX IF EXISTS jobs_queued_run_at;
CREATE INDEX jobs_queued_run_at ON jobs (run_at, id, queue, type) WHERE status = 'queued';

-- Rescue (expired leases), "oldest running", running jobs per queue and type.
DROP INDEX IF EXISTS jobs_running;
CREATE INDEX jobs_running ON jobs (lease_expires_at, queue, type) WHERE status = 'running';
