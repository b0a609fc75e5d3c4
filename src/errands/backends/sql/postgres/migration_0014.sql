-- errands schema version 14 (PostgreSQL): storage settings for the tables every job rewrites
-- (issue #35, docs/postgres.md "Dead tuples, vacuum and the xmin horizon"), so how soon their
-- dead tuples are reclaimed does not depend on the server's defaults. Storage parameters
-- only: no row, column or index changes, and a server whose autovacuum is off ignores the
-- autovacuum_* ones (errands' own vacuum service then reclaims the dead tuples).
--
-- The server's default rule vacuums a table once its dead tuples pass 50 + 20% of its rows.
-- A queue's job history makes that 20% huge (a million kept jobs: 200,000 dead tuples before
-- the first vacuum), while what a claim pays for is the absolute number of dead entries it
-- walks past in the due-jobs index. So the hot tables get a small scale factor and an
-- absolute threshold — the pattern job queues and other high-churn PostgreSQL tables use — and
-- the tiny counter tables a scale factor of 0: they are a few rows updated on every job.

-- jobs: every claim, heartbeat and outcome writes a new version of the row. Vacuum after
-- 1,000 + 1% dead (a million kept jobs: 11,000, not 200,000); at full speed (no cost delay:
-- the default throttling makes one pass over a churned table take minutes, during which the
-- claims pay for the dead tuples). fillfactor 90 leaves a tenth of each new page free, so an
-- update that touches no indexed column (a heartbeat, progress) stays on its page (a HOT
-- update: no new index entries at all); more would make the history larger for updates that
-- mostly change indexed columns (status) and cannot be HOT anyway.
ALTER TABLE jobs SET (
    fillfactor = 90,
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 0
);

-- job_attempts: one insert per claim and one update per outcome (its ended_at and status):
-- half of jobs' churn, the same rule.
ALTER TABLE job_attempts SET (
    fillfactor = 90,
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_cost_delay = 0
);

-- The figures kept per job (counter shards, the minute's measures, error minutes), the
-- workers' heartbeats, the maintenance leases and the limits' counters: a few rows, each
-- updated over and over. Vacuum after every 200 dead versions whatever the size (scale 0),
-- and keep half of each page free so nearly every update is HOT and stays on its page.
ALTER TABLE job_counts SET (
    fillfactor = 50, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 200
);
ALTER TABLE job_stats_minutely SET (
    fillfactor = 50, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 200
);
ALTER TABLE job_errors_minutely SET (
    fillfactor = 50, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 200
);
ALTER TABLE workers SET (
    fillfactor = 50, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 200
);
ALTER TABLE maintenance_leases SET (
    fillfactor = 50, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 200
);
ALTER TABLE flow_limits SET (
    fillfactor = 50, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 200
);
ALTER TABLE limit_starts SET (
    autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000
);
