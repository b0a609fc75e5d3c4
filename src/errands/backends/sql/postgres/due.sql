-- What a job must be for a claim to take it, written once (the loader splices fragments:
-- errands.backends.sql): every query that picks jobs to claim writes {{due_job}} where
-- this goes. Same fragment in sql/sqlite/due.sql. Whether the job is limited (limit_key)
-- stays in each query: the plain claim takes only unlimited jobs, the limited claim only
-- limited ones.

-- fragment: due_job
-- Queued and due, not expired (expires_in bounds only the wait for a first start), before its
-- deadline, of the worker's :types and :queues (NULL: any), its queue not paused nor every
-- queue paused ('*'). Columns unqualified: those of the jobs row the query reads. Used by
-- claim_recorded (its three ranges), claim_behind, limited_due, unlimited_due, fair_due and
-- order_head (whether a value's head may start).
status = 'queued'
  AND run_at <= to_timestamp(:now)
  AND (expires_at IS NULL OR expires_at > to_timestamp(:now) OR started_at IS NOT NULL)
  AND (deadline_at IS NULL OR deadline_at > to_timestamp(:now))
  AND type = ANY(CAST(:types AS text[]))
  AND (CAST(:queues AS text[]) IS NULL OR queue = ANY(CAST(:queues AS text[])))
  AND queue NOT IN (SELECT queue FROM queue_pauses)
  AND NOT EXISTS (SELECT 1 FROM queue_pauses WHERE queue = '*')
