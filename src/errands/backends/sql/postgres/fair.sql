-- Fair share (docs/flow-control.md, backends/fair.py): the stored turns of fair keys. Same
-- names as sql/sqlite/fair.sql. Read and written inside the claim's transaction, for values
-- whose group lock (limited_groups) the claim holds: only it moves their tags.

-- name: fair_keys
-- The fair keys whose turns are stored (a key is served once before it has a clock), and
-- those a worker declares (task_types), which have none before their first turn.
SELECT key FROM fair_clocks
UNION
SELECT options->>'fair_key' AS key FROM task_types WHERE options->>'fair_key' IS NOT NULL
ORDER BY key;

-- name: stored_limit_keys
-- Every key with a stored limit (the code's or an operator's): a fair key among them is capped.
SELECT key FROM flow_limits;

-- name: fair_turns_of
-- A fair key's stored turns in one read: a first row (value NULL) with its virtual time (no
-- row: 0), then the values whose start tag is ahead of it; a value not listed stands at the
-- clock (its tag is behind it, or it was trimmed or never served).
SELECT NULL AS value, vtime AS tag FROM fair_clocks WHERE key = :key
UNION ALL
SELECT value, tag FROM fair_turns
WHERE key = :key
  AND tag > COALESCE((SELECT vtime FROM fair_clocks WHERE key = :key), 0);

-- name: save_fair_tags
-- The new start tags of the values a claim served: :rows is a JSON array of [value, tag].
INSERT INTO fair_turns (key, value, tag)
SELECT :key, e->>0, (e->>1)::double precision FROM jsonb_array_elements(CAST(:rows AS jsonb)) AS e
ON CONFLICT (key, value) DO UPDATE SET tag = GREATEST(fair_turns.tag, excluded.tag);

-- name: advance_fair_clock
-- Move a fair key's virtual time forward to :vtime (never back; concurrent claims commute).
INSERT INTO fair_clocks (key, vtime) VALUES (:key, :vtime)
ON CONFLICT (key) DO UPDATE SET vtime = GREATEST(fair_clocks.vtime, excluded.vtime);

-- name: trim_fair_tags
-- Drop the tags at or behind the key's clock: a missing tag stands for the clock.
DELETE FROM fair_turns WHERE key = :key AND tag <= :vtime;

-- name: fair_counts
-- Per fair key and value: queued jobs due now, queued in all, running (fair keys: :keys, a
-- JSON array).
SELECT limit_key AS key, limit_group AS value,
       SUM(CASE WHEN status = 'queued' AND run_at <= to_timestamp(:now) THEN 1 ELSE 0 END) AS due,
       SUM(CASE WHEN status = 'queued' THEN 1 ELSE 0 END) AS queued,
       SUM(CASE WHEN status = 'running' THEN 1 ELSE 0 END) AS running
FROM jobs
WHERE status IN ('queued', 'running')
  AND limit_key IN (SELECT jsonb_array_elements_text(CAST(:keys AS jsonb)))
GROUP BY limit_key, limit_group;

-- name: fair_served
-- Per fair key and value: attempts started since :since (fair keys: :keys, a JSON array).
SELECT j.limit_key AS key, j.limit_group AS value, COUNT(*) AS served
FROM job_attempts AS a JOIN jobs AS j ON j.id = a.job_id
WHERE a.started_at >= to_timestamp(:since)
  AND j.limit_key IN (SELECT jsonb_array_elements_text(CAST(:keys AS jsonb)))
GROUP BY j.limit_key, j.limit_group;

-- name: fair_due
-- The best due jobs of many values of a fair key in one statement (:rows is a JSON array of
-- [value, n]): per value, limited_due's probe (an expired job is passed over), up to its n
-- (and :n, the largest: SQLite's LIMIT cannot read the row, so both bind it), locked like it.
SELECT d.id, d.priority, d.run_at, d.limit_group
FROM jsonb_array_elements(CAST(:rows AS jsonb)) WITH ORDINALITY AS v(e, n),
LATERAL (
    SELECT id, priority, run_at, limit_group FROM jobs
    WHERE {{due_job}}
      AND limit_key IS NOT NULL
      AND limit_key = :key AND limit_group = v.e->>0
    ORDER BY priority DESC, run_at, id
    LIMIT LEAST((v.e->>1)::integer, :n)
    FOR UPDATE SKIP LOCKED) AS d
ORDER BY v.n, d.priority DESC, d.run_at, d.id;
