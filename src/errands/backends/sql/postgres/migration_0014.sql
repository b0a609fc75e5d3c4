-- errands schema version 14 (postgres): a placeholder on the time-rules branch, standing for the
-- migration another branch of issue #34 adds under this number; the merge takes that one.
SELECT 1;
