-- What a job must be for a claim to take it, written once (the loader splices fragments:
-- errands.backends.sql): every query that picks jobs to claim writes {{due_job}} where
-- this goes. Same fragment in sql/postgres/due.sql. Whether the job is limited (limit_key)
-- stays in each query: the plain claim takes only unlimited jobs, the limited claim only
-- limited ones.

-- fragment: due_job
-- Queued and due, not expired (expires_in bounds only the wait for a first start), before its
-- deadline, of the worker's :types and :queues (NULL: any), its queue not paused nor every
-- queue paused ('*'). Columns unqualified: those of the jobs row the query reads. Used by
-- claim, claim_behind, and the limited claim's limited_due, unlimited_due, fair_due and
-- order_head (whether a value's head may start).
-- status = 'queued' is a literal (not bound) so that SQLite can use the partial indexes
-- jobs_due and jobs_limited_due.
status = 'queued'
  AND run_at <= :now
  AND (expires_at IS NULL OR expires_at > :now OR started_at IS NOT NULL)
  AND (deadline_at IS NULL OR deadline_at > :now)
  AND type IN (SELECT value FROM json_each(:types))
  AND (:queues IS NULL OR queue IN (SELECT value FROM json_each(:queues)))
  AND queue NOT IN (SELECT queue FROM queue_pauses)
  AND NOT EXISTS (SELECT 1 FROM queue_pauses WHERE queue = '*')
