-- The operator activity log (backends/activity.py): one row per operator action.
-- Same names as sql/sqlite/activity.sql.

-- name: insert_activity
-- Record one operator action; returns its id.
INSERT INTO operator_actions (at, actor, action, target, count, filter, detail)
VALUES (to_timestamp(:now), :actor, :action, :target, :count,
        CAST(:filter AS jsonb), CAST(:detail AS jsonb))
RETURNING id;

-- name: list_activity
-- Operator actions, newest first, optionally by actor and action, keyset-paginated by id.
SELECT id, at, actor, action, target, count, filter, detail FROM operator_actions
WHERE (CAST(:actor AS text) IS NULL OR actor = :actor)
  AND (CAST(:action AS text) IS NULL OR action = :action)
  AND (CAST(:before AS bigint) IS NULL OR id < :before)
ORDER BY id DESC
LIMIT :limit;

-- name: activity_actors
-- The actors and actions seen among the newest rows (the page's filter choices).
SELECT DISTINCT actor, action FROM (
    SELECT actor, action FROM operator_actions ORDER BY id DESC LIMIT :scan
) AS recent;

-- name: prune_activity
-- Delete up to :limit operator actions older than :cutoff, oldest first; returns how many.
DELETE FROM operator_actions WHERE id IN (
    SELECT id FROM operator_actions WHERE at < to_timestamp(:cutoff) ORDER BY at LIMIT :limit
) RETURNING id;
