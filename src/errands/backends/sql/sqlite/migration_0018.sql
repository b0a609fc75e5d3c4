-- errands schema version 18 (SQLite): the operator activity log (docs/dashboard.md,
-- "Activity"). One row per operator action — a retry, a bulk cancel, a pause, a limit, a
-- schedule switched off, a prune — whoever took it: the token's label, the user an auth
-- callable named, cli:<user>, or the actor a Queue method was given. A deleted job takes its
-- events with it; this table keeps who deleted it. Prune keeps it for activity_retention.
CREATE TABLE IF NOT EXISTS operator_actions (
    id     INTEGER PRIMARY KEY AUTOINCREMENT,
    at     REAL NOT NULL,
    actor  TEXT NOT NULL,
    action TEXT NOT NULL,
    target TEXT,
    count  INTEGER NOT NULL DEFAULT 0,
    filter TEXT,
    detail TEXT
);
-- Newest first, whole or by actor or by action (the page's filters); prune cuts by time.
CREATE INDEX IF NOT EXISTS operator_actions_actor ON operator_actions (actor, id);
CREATE INDEX IF NOT EXISTS operator_actions_action ON operator_actions (action, id);
CREATE INDEX IF NOT EXISTS operator_actions_at ON operator_actions (at);
