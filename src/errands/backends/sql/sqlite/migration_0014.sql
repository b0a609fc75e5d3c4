-- errands schema version 14 (sqlite): a placeholder on the time-rules branch, standing for the
-- migration another branch of issue #34 adds under this number; the merge takes that one.
SELECT 1;
