-- errands schema version 6 (SQLite): the figures are kept by errands' own writes, no triggers.
-- The row triggers of migrations 0002/0004 cost the worker's hot path 10-16 us per job even
-- standing aside (SQLite runs each trigger's program per row, its WHEN included: two per
-- claimed row, three per finished row; issue #14, #12). Every errands write that moves a job
-- into or out of a final state, or closes an attempt with an outcome, now counts in its own
-- transaction with grouped named queries (jobs.sql: count_batch_jobs, count_batch_minutes,
-- count_batch_errors, uncount_jobs; figures.py says which path runs which). A hand-written
-- change of the jobs rows is not seen: recount (docs/operations.md, Queue.recount_figures).
DROP TRIGGER IF EXISTS jobs_finished_insert;
DROP TRIGGER IF EXISTS jobs_finished_update;
DROP TRIGGER IF EXISTS jobs_unfinished_update;
DROP TRIGGER IF EXISTS jobs_finished_delete;
DROP TRIGGER IF EXISTS job_attempts_finished_update;
DROP TRIGGER IF EXISTS job_attempts_finished_insert;

-- The batch mark existed only to make those triggers stand aside.
DROP TABLE IF EXISTS figures_counted_by_batch;
