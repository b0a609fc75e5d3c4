-- errands schema version 13 (PostgreSQL): enqueue from any language (issue #38). The function
-- errands_enqueue does, in one call, what Queue.enqueue does for a Queue with no tasks of its
-- own (a producer): the checks, the jobs row, its ENQUEUED event, the unique-key rule and the
-- NOTIFY that wakes the workers. docs/from-other-languages.md is its contract; the tests
-- (tests/client/test_sql_enqueue.py) compare its rows with q.enqueue's column by column.
-- Under a table prefix every name here carries it (errands_errands_enqueue, errands_jobs, the
-- errands_jobs channel): backends/prefix.py rewrites the bare words and literals that name
-- errands' objects, inside the function body too.
-- priority and max_attempts are bigint so that a driver sending a 64-bit integer (psycopg
-- does for any int past 32 bits) finds the function and gets the range error below, not
-- "function errands_enqueue(…) does not exist".
CREATE OR REPLACE FUNCTION errands_enqueue(
    type text,
    payload jsonb DEFAULT NULL,
    queue text DEFAULT NULL,
    priority bigint DEFAULT NULL,
    run_at timestamptz DEFAULT NULL,
    max_attempts bigint DEFAULT NULL,
    unique_key text DEFAULT NULL,
    actor text DEFAULT 'sql'
) RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
DECLARE
    -- Positional aliases: the parameters share names with jobs' columns (which win, above).
    p_type ALIAS FOR $1;
    p_payload ALIAS FOR $2;
    p_queue ALIAS FOR $3;
    p_priority ALIAS FOR $4;
    p_run_at ALIAS FOR $5;
    p_max_attempts ALIAS FOR $6;
    p_unique_key ALIAS FOR $7;
    p_actor ALIAS FOR $8;
    v_now timestamptz := now();
    v_payload jsonb := COALESCE(p_payload, '{}');
    v_queue text;
    v_priority integer;
    v_max_attempts integer;
    v_id bigint;
    v_size integer;
BEGIN
    -- The checks of core/validate.py, in its order (type, payload, numbers, names), with its
    -- words; a refused call writes nothing (check_violation, SQLSTATE 23514).
    IF p_type IS NULL OR p_type = '' THEN
        RAISE EXCEPTION 'errands_enqueue: type must be a non-empty string (a task name), got %',
            quote_nullable(p_type) USING ERRCODE = 'check_violation';
    END IF;
    PERFORM errands_enqueue_name(p_type, 'type');
    IF jsonb_typeof(v_payload) = 'null' THEN
        v_payload := '{}';  -- as q.enqueue(type, None)
    END IF;
    v_size := octet_length(v_payload::text);
    IF v_size > 1048576 THEN
        RAISE EXCEPTION 'errands_enqueue: payload is % bytes (as PostgreSQL prints it); at most 1048576 (1 MiB, the default max_payload_bytes) are allowed; store the data elsewhere and pass a reference',
            v_size USING ERRCODE = 'check_violation';
    END IF;
    -- Integers outside the signed 64-bit range (SQLite reads them as floating point, so a job
    -- would not get back what was enqueued); looked for only where the text holds 19 digits.
    IF v_payload::text ~ '[0-9]{19}' AND jsonb_path_exists(v_payload,
        'strict $.** ? (@.type() == "number" && @ == @.floor() && (@ > 9223372036854775807 || @ < -9223372036854775808))')
    THEN
        RAISE EXCEPTION 'errands_enqueue: payload holds an integer outside the signed 64-bit range every backend stores exactly; pass it as a string'
            USING ERRCODE = 'check_violation';
    END IF;
    -- Nesting deeper than core/payload.py's MAX_DEPTH (100 levels): walked only when the text
    -- is long enough to hold that many brackets.
    IF v_size > 200 AND (
        WITH RECURSIVE walk(v, depth) AS (
            SELECT v_payload, 1
            UNION ALL
            SELECT c.value, w.depth + 1
            FROM walk w
            CROSS JOIN LATERAL (
                SELECT e.value FROM jsonb_each(
                    CASE WHEN jsonb_typeof(w.v) = 'object' THEN w.v END) AS e
                UNION ALL
                SELECT a.value FROM jsonb_array_elements(
                    CASE WHEN jsonb_typeof(w.v) = 'array' THEN w.v END) AS a
            ) AS c
            WHERE jsonb_typeof(c.value) IN ('object', 'array') AND w.depth <= 100
        )
        SELECT max(depth) FROM walk
    ) > 100 THEN
        RAISE EXCEPTION 'errands_enqueue: payload is nested deeper than 100 levels; flatten it, or pass the deep part as a JSON string'
            USING ERRCODE = 'check_violation';
    END IF;
    IF p_run_at IS NOT NULL AND NOT (p_run_at BETWEEN '0001-01-01 00:00:00+00'
                                     AND '9999-12-31 23:59:59+00') THEN
        RAISE EXCEPTION 'errands_enqueue: run_at must be between the years 1 and 9999 (UTC), got %',
            p_run_at USING ERRCODE = 'check_violation';
    END IF;
    IF p_priority IS NOT NULL AND (p_priority < -2147483648 OR p_priority > 2147483647) THEN
        RAISE EXCEPTION 'errands_enqueue: priority must be between -2147483648 and 2147483647, got %',
            p_priority USING ERRCODE = 'check_violation';
    END IF;
    IF p_max_attempts IS NOT NULL AND (p_max_attempts < 1 OR p_max_attempts > 1000000) THEN
        RAISE EXCEPTION 'errands_enqueue: max_attempts must be between 1 and 1000000, got %',
            p_max_attempts USING ERRCODE = 'check_violation';
    END IF;
    IF p_unique_key IS NOT NULL THEN
        IF p_unique_key = '' THEN
            RAISE EXCEPTION 'errands_enqueue: unique_key must be a non-empty string, got ''''; pass NULL for none'
                USING ERRCODE = 'check_violation';
        END IF;
        IF octet_length(p_unique_key) > 1024 THEN
            RAISE EXCEPTION 'errands_enqueue: unique_key is % bytes; at most 1024 are allowed',
                octet_length(p_unique_key) USING ERRCODE = 'check_violation';
        END IF;
    END IF;
    IF p_queue IS NOT NULL THEN
        PERFORM errands_enqueue_name(p_queue, 'queue');
    END IF;
    IF p_actor IS NULL OR p_actor = '' OR octet_length(p_actor) > 255 THEN
        RAISE EXCEPTION 'errands_enqueue: actor must be a non-empty string of at most 255 bytes, got %',
            quote_nullable(left(p_actor, 60)) USING ERRCODE = 'check_violation';
    END IF;
    -- What the call leaves out: the options the worker running this type declared
    -- (task_types, as client/declared.py reads them), else the documented defaults.
    SELECT t.queue, t.priority, t.max_attempts INTO v_queue, v_priority, v_max_attempts
    FROM task_types t WHERE t.type = p_type;
    v_queue := COALESCE(p_queue, v_queue, 'default');
    v_priority := COALESCE(p_priority, v_priority, 0);
    v_max_attempts := COALESCE(p_max_attempts, v_max_attempts, 20);
    -- jobs.sql insert_job: an active job holding the unique_key keeps it, nothing is written.
    -- status is the column's default, the state an enqueue moves a job to (core/states.py).
    INSERT INTO jobs (queue, type, payload, priority, max_attempts, run_at, created_at,
                      unique_key)
    VALUES (v_queue, p_type, v_payload, v_priority, v_max_attempts,
            COALESCE(p_run_at, v_now), v_now, p_unique_key)
    ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND status IN ('queued', 'running')
    DO NOTHING
    RETURNING id INTO v_id;
    IF v_id IS NULL THEN
        SELECT j.id INTO v_id FROM jobs j
        WHERE j.unique_key = p_unique_key AND j.status IN ('queued', 'running');
        RETURN v_id;
    END IF;
    INSERT INTO job_events (job_id, ts, event, actor, detail)
    VALUES (v_id, v_now, 'ENQUEUED', p_actor, NULL);
    -- own.sql insert_job_recorded: a due job wakes the listening workers, at commit.
    IF COALESCE(p_run_at, v_now) <= v_now THEN
        PERFORM pg_notify('errands_jobs', '');
    END IF;
    RETURN v_id;
END
$$;

-- A task type or queue name: validate.name's rule (non-empty, at most 255 bytes, no comma).
CREATE OR REPLACE FUNCTION errands_enqueue_name(value text, what text) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    IF $1 IS NULL OR $1 = '' THEN
        RAISE EXCEPTION 'errands_enqueue: % must be a non-empty string, got %', $2,
            quote_nullable($1) USING ERRCODE = 'check_violation';
    END IF;
    IF octet_length($1) > 255 THEN
        RAISE EXCEPTION 'errands_enqueue: % is % bytes; at most 255 are allowed', $2,
            octet_length($1) USING ERRCODE = 'check_violation';
    END IF;
    IF strpos($1, ',') > 0 THEN
        RAISE EXCEPTION 'errands_enqueue: % % contains a comma, which errands uses to separate names (--queues a,b and the workers registry); choose a name without commas',
            $2, quote_literal(left($1, 60)) USING ERRCODE = 'check_violation';
    END IF;
END
$$;
