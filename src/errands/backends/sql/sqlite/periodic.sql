-- Periodic schedules for SQLite. The PostgreSQL file keeps the same names and column order.

-- name: upsert_periodic
-- Register a schedule; next_run_at is kept unless the timing (cron, interval, zone) changed,
-- so redeploying the same code never moves or repeats a tick. (An upsert, not a replace: replacing would delete the row.)
INSERT INTO periodic (name, cron, interval_seconds, timezone, type, payload, queue,
                      next_run_at, catch_up, grace_seconds)
VALUES (:name, :cron, :interval_seconds, :timezone, :type, :payload, :queue,
        :next_run_at, :catch_up, :grace_seconds)
ON CONFLICT (name) DO UPDATE SET
    next_run_at = CASE
        WHEN periodic.cron IS NOT excluded.cron
          OR periodic.interval_seconds IS NOT excluded.interval_seconds
          OR periodic.timezone IS NOT excluded.timezone
          OR periodic.next_run_at IS NULL
        THEN excluded.next_run_at ELSE periodic.next_run_at END,
    cron = excluded.cron, interval_seconds = excluded.interval_seconds,
    timezone = excluded.timezone, type = excluded.type, payload = excluded.payload,
    queue = excluded.queue, catch_up = excluded.catch_up, grace_seconds = excluded.grace_seconds;

-- name: list_periodic
-- Every schedule; last_succeeded_at is the newer of the stored value and the newest succeeded
-- job of its type still in the table (jobs_succeeded_type makes that a lookup).
SELECT p.name, p.cron, p.interval_seconds, p.timezone, p.type, p.payload, p.queue,
       p.last_enqueued_at, p.next_run_at,
       MAX(COALESCE(p.last_succeeded_at, 0),
           COALESCE((SELECT MAX(j.finished_at) FROM jobs j
                     WHERE j.status = 'succeeded' AND j.type = p.type), 0)) AS last_succeeded_at,
       p.catch_up, p.grace_seconds, p.last_succeeded_at AS stored_succeeded_at,
       p.first_enqueued_at, p.disabled_at, p.disabled_by, p.enabled_at
FROM periodic p ORDER BY p.name;

-- name: advance_periodic
-- Compare-and-set: move next_run_at from the value the scheduler read to the next tick.
-- Exactly one scheduler wins a tick; the winner inserts the job in the same transaction.
UPDATE periodic SET next_run_at = :next_run_at,
    last_enqueued_at = CASE WHEN :enqueued = 1 THEN :now ELSE last_enqueued_at END,
    first_enqueued_at = CASE WHEN :enqueued = 1 AND first_enqueued_at IS NULL THEN :now
                        ELSE first_enqueued_at END
WHERE name = :name AND next_run_at = :expected AND disabled_at IS NULL
RETURNING name;

-- name: record_periodic_success
-- Persist the newest success of a schedule's type so it outlives pruning of that job.
UPDATE periodic SET last_succeeded_at = :succeeded_at
WHERE name = :name AND (last_succeeded_at IS NULL OR last_succeeded_at < :succeeded_at);

-- name: remove_periodic
-- Delete a schedule's row (`errands periodic remove NAME`); its jobs stay as they are.
DELETE FROM periodic WHERE name = :name
RETURNING name;

-- name: disable_periodic
-- An operator disables a schedule: the scheduler enqueues none of its ticks (advance_periodic
-- is fenced on disabled_at IS NULL). A disabled one keeps who disabled it first, and when.
UPDATE periodic SET disabled_at = :now, disabled_by = :actor
WHERE name = :name AND disabled_at IS NULL
RETURNING name;

-- name: enable_periodic
-- Enable a disabled schedule again: its next tick is the first after now (:next_run_at; the
-- ticks it skipped are not caught up), and enabled_at marks when, so those skipped ticks are
-- never owed (overdue). Enabling an enabled schedule changes nothing.
UPDATE periodic SET disabled_at = NULL, disabled_by = NULL, enabled_at = :now,
    next_run_at = :next_run_at
WHERE name = :name AND disabled_at IS NOT NULL
RETURNING name;

-- name: periodic_exists
-- Whether a schedule of this name exists (run now reads it in its own transaction).
SELECT name FROM periodic WHERE name = :name;
