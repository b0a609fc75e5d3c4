-- errands schema version 6 (SQLite): fewer index entries written per job (issue #12). Every
-- job paid for jobs_status_queue_type, a full index on (status, queue, type): a claim and an
-- outcome each deleted and inserted an entry in it. Its queued and running halves now live in
-- the partial indexes those states already keep, widened to cover queue and type: the counts
-- per queue and type, oldest_due, next_due, rescue and oldest_running read them (bounded by
-- the active jobs). Finished jobs are found through jobs_finished (status, finished_at), which
-- holds them all (a final state always carries finished_at), and counted from job_counts.
-- Per job: enqueue writes 2 secondary entries (was 3), claim 3 (was 5), success 3 (was 5).
-- Queries on a state bound as a parameter cannot use a partial index (SQLite, and PostgreSQL's
-- generic plans, use one only when the query's WHERE implies its predicate as written): each
-- such query has a literal variant per index (ops.sql: ids_matching_queued, …).

DROP INDEX IF EXISTS jobs_status_queue_type;

-- "Oldest due queued job" (in the order ORDER BY run_at, id asks for: id is a key column, not
-- only the row pointer after queue and type), the worker's next wake-up (a range on run_at
-- over queued rows, its type filter read from the index), and queued jobs per queue and type.
DROP INDEX IF EXISTS jobs_queued_run_at;
CREATE INDEX jobs_queued_run_at ON jobs (run_at, id, queue, type) WHERE status = 'queued';

-- Rescue (expired leases), "oldest running", and running jobs per queue and type.
DROP INDEX IF EXISTS jobs_running;
CREATE INDEX jobs_running ON jobs (lease_expires_at, queue, type) WHERE status = 'running';
