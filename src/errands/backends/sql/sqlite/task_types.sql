-- Task types and their declared options (table task_types, migration 7), for SQLite. The
-- PostgreSQL file keeps the same names, parameters and column order.

-- name: declare_task_type
-- Record a task type's options as the worker that runs it declares them (the latest
-- declaration wins: a redeploy that changes them takes effect when its workers start).
INSERT INTO task_types (type, queue, priority, max_attempts, timeout_seconds, options,
                        declared_by, declared_at)
VALUES (:type, :queue, :priority, :max_attempts, :timeout_seconds, :options, :declared_by, :now)
ON CONFLICT (type) DO UPDATE SET
    queue = excluded.queue, priority = excluded.priority, max_attempts = excluded.max_attempts,
    timeout_seconds = excluded.timeout_seconds, options = excluded.options,
    declared_by = excluded.declared_by, declared_at = excluded.declared_at;

-- name: list_task_types
-- Every declared task type (what a producer caches).
SELECT type, queue, priority, max_attempts, timeout_seconds, options, declared_by, declared_at
FROM task_types ORDER BY type;
