-- errands schema version 20 (PostgreSQL): the head of an ordered value in one index seek (issue
-- #34, docs/flow-control.md "Order per key"). The claim's head probe (order.sql, order_head)
-- takes the lowest id among a value's unfinished jobs; read through jobs_limited_due (by
-- priority, run_at, id within the group) that meant every queued job of the value, so a
-- value with 10,000 jobs behind a stuck head cost 10,000 index entries on every claim. Here
-- the value's unfinished jobs are in id order: the lowest is the first entry. Limited jobs
-- only (limit_key IS NOT NULL): unlimited jobs pay nothing for it.
CREATE INDEX IF NOT EXISTS jobs_order_head ON jobs (limit_key, limit_group, id)
    WHERE status IN ('waiting', 'queued', 'running') AND limit_key IS NOT NULL;
