-- errands schema version 13 (SQLite): enqueue from any language (issue #38). SQLite has no
-- functions written in SQL, so the contract is a view: INSERT INTO errands_enqueue (type,
-- payload, queue, priority, run_at, max_attempts, unique_key, actor) VALUES (…), from any
-- SQLite client. Its INSTEAD OF trigger does what Queue.enqueue does for a Queue with no tasks
-- of its own (a producer): the checks, the jobs row, its ENQUEUED event and the unique-key
-- rule; a worker notices the commit by its data_version check (docs/from-other-languages.md).
-- The PostgreSQL twin is the function errands_enqueue (sql/postgres/migration_0013.sql).
-- Under a table prefix every name here carries it (backends/prefix.py).
CREATE VIEW IF NOT EXISTS errands_enqueue AS
SELECT NULL AS type, NULL AS payload, NULL AS queue, NULL AS priority, NULL AS run_at,
       NULL AS max_attempts, NULL AS unique_key, NULL AS actor
WHERE 0;

CREATE TRIGGER IF NOT EXISTS errands_enqueue_insert INSTEAD OF INSERT ON errands_enqueue
BEGIN
    -- The checks of core/validate.py and core/payload.py, in their order (type, payload,
    -- times, numbers, names), with their words; RAISE(ABORT) undoes the whole INSERT.
    SELECT RAISE(ABORT, 'errands_enqueue: this database was moved by errands graduate and takes no new jobs; enqueue into the database it moved to')
    WHERE EXISTS (SELECT 1 FROM errands_meta WHERE key = 'graduated_to');
    SELECT RAISE(ABORT, 'errands_enqueue: type must be a non-empty string (a task name)')
    WHERE typeof(NEW.type) <> 'text' OR NEW.type = '';
    SELECT RAISE(ABORT, 'errands_enqueue: type is longer than 255 bytes')
    WHERE length(CAST(NEW.type AS BLOB)) > 255;
    SELECT RAISE(ABORT, 'errands_enqueue: type contains a NUL character; remove it')
    WHERE instr(CAST(NEW.type AS BLOB), x'00') > 0;
    SELECT RAISE(ABORT, 'errands_enqueue: type contains a comma, which errands uses to separate names; choose a name without commas')
    WHERE instr(NEW.type, ',') > 0;
    SELECT RAISE(ABORT, 'errands_enqueue: payload must be JSON text (a string holding JSON, e.g. ''{"to": "a@example.com"}''), not a number or a blob')
    WHERE NEW.payload IS NOT NULL AND typeof(NEW.payload) <> 'text';
    SELECT RAISE(ABORT, 'errands_enqueue: payload is not valid JSON (json_valid refused it); pass RFC 8259 JSON text')
    WHERE NEW.payload IS NOT NULL AND NOT json_valid(NEW.payload);
    SELECT RAISE(ABORT, 'errands_enqueue: payload is larger than 1048576 bytes (1 MiB, the default max_payload_bytes); store the data elsewhere and pass a reference')
    WHERE length(CAST(NEW.payload AS BLOB)) > 1048576;
    -- NUL or a lone surrogate in a string or key: PostgreSQL's jsonb refuses both, and a
    -- surrogate is not UTF-8 (the worker could not read it). Looked for in the text, escaped
    -- backslashes ('\\') set aside first: a NUL is only ever the escape \u0000 there.
    SELECT RAISE(ABORT, 'errands_enqueue: payload holds a NUL character (\u0000) in a string or key, which no backend stores as text; remove it, or pass binary data as base64')
    WHERE instr(lower(replace(NEW.payload, '\\', '')), '\u0000') > 0;
    -- A surrogate escape decodes to the bytes ED A0..BF when it has no partner (a pair
    -- decodes to one 4-byte character); json_tree is walked only when such an escape is there.
    SELECT RAISE(ABORT, 'errands_enqueue: payload holds a lone surrogate (\ud800-\udfff without its pair) in a string or key, which is not valid UTF-8; remove it')
    WHERE lower(replace(NEW.payload, '\\', '')) GLOB '*\ud[89abcdef]*' AND EXISTS (
        SELECT 1 FROM json_tree(NEW.payload)
        WHERE (type = 'text' AND hex(atom) GLOB '*ED[AB]*') OR hex(key) GLOB '*ED[AB]*');
    -- Integers outside the signed 64-bit range: SQLite reads them as floating point, so the
    -- job would not get back what was enqueued (looked for only where 19 digits follow).
    SELECT RAISE(ABORT, 'errands_enqueue: payload holds an integer outside the signed 64-bit range every backend stores exactly; pass it as a string')
    WHERE NEW.payload GLOB '*[0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9]*'
      AND EXISTS (
        -- json_tree types such a number 'integer' but reads it as a float
        SELECT 1 FROM json_tree(NEW.payload) WHERE type = 'integer' AND typeof(atom) = 'real');
    -- Nesting deeper than core/payload.py's MAX_DEPTH (100 levels), from each container's
    -- path (a key holding '.' or '[' counts one level more: such deep keys are refused
    -- early, never a shallow payload); walked only when the text is long enough.
    SELECT RAISE(ABORT, 'errands_enqueue: payload is nested deeper than 100 levels; flatten it, or pass the deep part as a JSON string')
    WHERE length(NEW.payload) > 200 AND EXISTS (
        SELECT 1 FROM json_tree(NEW.payload)
        WHERE type IN ('object', 'array')
          AND length(fullkey) - length(replace(replace(fullkey, '.', ''), '[', '')) >= 100);
    SELECT RAISE(ABORT, 'errands_enqueue: run_at must be a unix timestamp in seconds (a number, UTC) between the years 1 and 9999')
    WHERE NEW.run_at IS NOT NULL AND (typeof(NEW.run_at) NOT IN ('integer', 'real')
        OR NEW.run_at < -62135596800 OR NEW.run_at > 253402300799);
    SELECT RAISE(ABORT, 'errands_enqueue: priority must be an integer between -2147483648 and 2147483647')
    WHERE NEW.priority IS NOT NULL AND (typeof(NEW.priority) <> 'integer'
        OR NEW.priority < -2147483648 OR NEW.priority > 2147483647);
    SELECT RAISE(ABORT, 'errands_enqueue: max_attempts must be an integer between 1 and 1000000')
    WHERE NEW.max_attempts IS NOT NULL AND (typeof(NEW.max_attempts) <> 'integer'
        OR NEW.max_attempts < 1 OR NEW.max_attempts > 1000000);
    SELECT RAISE(ABORT, 'errands_enqueue: unique_key must be a non-empty string of at most 1024 bytes without NUL characters; pass NULL for none')
    WHERE NEW.unique_key IS NOT NULL AND (typeof(NEW.unique_key) <> 'text'
        OR NEW.unique_key = '' OR length(CAST(NEW.unique_key AS BLOB)) > 1024
        OR instr(CAST(NEW.unique_key AS BLOB), x'00') > 0);
    SELECT RAISE(ABORT, 'errands_enqueue: queue must be a non-empty string of at most 255 bytes, without commas or NUL characters')
    WHERE NEW.queue IS NOT NULL AND (typeof(NEW.queue) <> 'text' OR NEW.queue = ''
        OR length(CAST(NEW.queue AS BLOB)) > 255 OR instr(NEW.queue, ',') > 0
        OR instr(CAST(NEW.queue AS BLOB), x'00') > 0);
    SELECT RAISE(ABORT, 'errands_enqueue: actor must be a non-empty string of at most 255 bytes without NUL characters (or NULL: sql)')
    WHERE NEW.actor IS NOT NULL AND (typeof(NEW.actor) <> 'text' OR NEW.actor = ''
        OR length(CAST(NEW.actor AS BLOB)) > 255 OR instr(CAST(NEW.actor AS BLOB), x'00') > 0);
    -- jobs.sql insert_job, with what the call leaves out taken from the options the worker
    -- running this type declared (task_types, as client/declared.py reads them), else the
    -- documented defaults; the payload minified as Python writes it ('null' → '{}', as
    -- q.enqueue(type, None)). An active job holding the unique_key keeps it: nothing is
    -- written. ('now' is one instant for the whole statement, so run_at = created_at; status
    -- is the column's default, the state an enqueue moves a job to, core/states.py.)
    INSERT INTO jobs (queue, type, payload, priority, max_attempts, run_at, created_at,
                      unique_key)
    SELECT COALESCE(NEW.queue, d.queue, 'default'), NEW.type,
           CASE WHEN NEW.payload IS NULL OR json_type(NEW.payload) = 'null' THEN '{}'
                ELSE json(NEW.payload) END,
           COALESCE(NEW.priority, d.priority, 0),
           COALESCE(NEW.max_attempts, d.max_attempts, 20),
           COALESCE(NEW.run_at, (julianday('now') - 2440587.5) * 86400.0),
           (julianday('now') - 2440587.5) * 86400.0, NEW.unique_key
    FROM (SELECT 1) AS one
    LEFT JOIN task_types AS d ON d.type = NEW.type
    WHERE true
    ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND status IN ('queued', 'running')
    DO NOTHING;
    -- Its event, only when the row was written (changes(): the trigger's last statement;
    -- last_insert_rowid(): its row, while the trigger runs).
    INSERT INTO job_events (job_id, ts, event, actor, detail)
    SELECT last_insert_rowid(), (julianday('now') - 2440587.5) * 86400.0, 'ENQUEUED',
           COALESCE(NEW.actor, 'sql'), NULL
    WHERE changes() = 1;
END;
