-- errands schema version 12 (SQLite): durable steps, sleeps and signals (issue #33,
-- docs/durable-steps.md).

-- One row per durable call of a job — a step, a sleep, a wait for a signal — numbered (seq,
-- from 0) in the order the handler calls them, written fenced on the attempt that ran it.
-- kind 'step': result is the step's JSON result. kind 'sleep': wake_at is when it ends.
-- kind 'wait': wake_at is its timeout (NULL: none), signal the name it waits for and
-- ordinal which signal of that name it takes (the k-th wait_for(name) takes the k-th);
-- finished_at is NULL while the job waits, then result is {"payload": …} or {"timeout": true}.
CREATE TABLE IF NOT EXISTS job_steps (
    job_id      INTEGER NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    seq         INTEGER NOT NULL CHECK (seq >= 0),
    kind        TEXT    NOT NULL CHECK (kind IN ('step', 'sleep', 'wait')),
    name        TEXT    NOT NULL,
    attempt     INTEGER NOT NULL,
    started_at  REAL    NOT NULL,
    finished_at REAL,
    result      TEXT,
    wake_at     REAL,
    signal      TEXT,
    ordinal     INTEGER,
    PRIMARY KEY (job_id, seq)
);
-- The waits still open, by timeout: the rescuer's pass reads only these (a few rows however
-- many steps are kept), and the dependency sweeper tells a signal-waiting job by one probe.
CREATE INDEX IF NOT EXISTS job_steps_open_waits ON job_steps (wake_at, job_id)
    WHERE kind = 'wait' AND finished_at IS NULL;

-- Sleeps by wake time: stats counts the jobs sleeping now (wake time ahead) from here.
CREATE INDEX IF NOT EXISTS job_steps_sleeps ON job_steps (wake_at, job_id) WHERE kind = 'sleep';

-- Signals sent to a job (q.signal), kept in order per job and name; a wait takes its own by
-- position (its ordinal), so a signal sent before the job waits is not lost.
CREATE TABLE IF NOT EXISTS job_signals (
    id      INTEGER PRIMARY KEY,
    job_id  INTEGER NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    name    TEXT    NOT NULL,
    payload TEXT,
    sent_at REAL    NOT NULL,
    actor   TEXT
);
CREATE INDEX IF NOT EXISTS job_signals_job ON job_signals (job_id, name, id);
