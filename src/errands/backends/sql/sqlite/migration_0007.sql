-- errands schema version 7 (SQLite): one truth across processes (issue #21).

-- task_types: the options of each task type, recorded by the worker that runs it when it
-- starts (Queue.run_worker), so a process that enqueues a type it does not declare itself
-- (a web process: q.enqueue("send_welcome", …)) stores its jobs with the options the task
-- declares (queue, priority, max_attempts) instead of the defaults. timeout_seconds is the
-- task's handler timeout (informational: the worker that runs the job applies its own);
-- options is a JSON object kept for options that come later (limits, defaults).
CREATE TABLE task_types (
    type            TEXT    PRIMARY KEY,
    queue           TEXT    NOT NULL DEFAULT 'default',
    priority        INTEGER NOT NULL DEFAULT 0,
    max_attempts    INTEGER NOT NULL DEFAULT 20 CHECK (max_attempts >= 1),
    timeout_seconds REAL,
    options         TEXT    NOT NULL DEFAULT '{}',
    declared_by     TEXT,
    declared_at     REAL    NOT NULL
);

-- errands_meta: facts about this database as a whole, one row per key. 'graduated_to': the
-- PostgreSQL database (password redacted) `errands graduate` moved this queue to; while the
-- row exists this file refuses new work (a worker, an enqueue) until `errands reopen`.
CREATE TABLE errands_meta (
    key        TEXT PRIMARY KEY,
    value      TEXT NOT NULL,
    updated_at REAL NOT NULL
);

-- The schedules each worker declares (comma-separated names; NULL: an older errands that did
-- not say), so a schedule no live worker declares reads "retired", not overdue.
ALTER TABLE workers ADD COLUMN schedules TEXT;

-- When a schedule first enqueued a job: a schedule that has never succeeded is overdue
-- measured from its first tick, not its latest (which moves on with every tick).
ALTER TABLE periodic ADD COLUMN first_enqueued_at REAL;
UPDATE periodic SET first_enqueued_at = COALESCE(
    (SELECT MIN(j.created_at) FROM jobs j WHERE j.type = periodic.type), last_enqueued_at)
WHERE last_enqueued_at IS NOT NULL AND first_enqueued_at IS NULL;
