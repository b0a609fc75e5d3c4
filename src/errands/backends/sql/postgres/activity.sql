-- The operator activity log (backends/activity.py): one row per operator action.
-- Same names as sql/sqlite/activity.sql.

-- name: insert_activity
-- Record one operator action; returns its id.
INSERT INTO operator_actions (at, actor, action, target, count, filter, detail)
VALUES (to_timestamp(:now), :actor, :action, :target, :count,
        CAST(:filter AS jsonb), CAST(:detail AS jsonb))
RETURNING id;

-- name: update_activity
-- A bulk action's row brought up to date by its next transaction (one per chunk of ids): the
-- jobs it changed so far, and its detail.
UPDATE operator_actions SET count = :count, detail = CAST(:detail AS jsonb)
WHERE id = :id
RETURNING id;

-- name: list_activity
-- Operator actions, newest first, keyset-paginated by id. One query per filter given (not
-- "(:actor IS NULL OR actor = :actor)", which no index can serve: a rare actor would be
-- looked for through the whole table).
SELECT id, at, actor, action, target, count, filter, detail FROM operator_actions
WHERE (CAST(:before AS bigint) IS NULL OR id < :before)
ORDER BY id DESC
LIMIT :limit;

-- name: list_activity_by_actor
-- One actor's actions, newest first (index operator_actions_actor).
SELECT id, at, actor, action, target, count, filter, detail FROM operator_actions
WHERE actor = :actor AND (CAST(:before AS bigint) IS NULL OR id < :before)
ORDER BY id DESC
LIMIT :limit;

-- name: list_activity_by_action
-- One action's rows, newest first (index operator_actions_action).
SELECT id, at, actor, action, target, count, filter, detail FROM operator_actions
WHERE action = :action AND (CAST(:before AS bigint) IS NULL OR id < :before)
ORDER BY id DESC
LIMIT :limit;

-- name: list_activity_by_actor_action
-- One actor's rows of one action, newest first.
SELECT id, at, actor, action, target, count, filter, detail FROM operator_actions
WHERE actor = :actor AND action = :action AND (CAST(:before AS bigint) IS NULL OR id < :before)
ORDER BY id DESC
LIMIT :limit;

-- name: activity_actors
-- The actors and actions seen among the newest rows (the page's filter choices).
SELECT DISTINCT actor, action FROM (
    SELECT actor, action FROM operator_actions ORDER BY id DESC LIMIT :scan
) AS recent;

-- name: prune_activity
-- Delete up to :limit operator actions older than :cutoff, oldest first, but row :keep (the
-- running prune's own, 0 if none yet); returns how many.
DELETE FROM operator_actions WHERE id IN (
    SELECT id FROM operator_actions WHERE at < to_timestamp(:cutoff) AND id <> :keep ORDER BY at LIMIT :limit
) RETURNING id;
