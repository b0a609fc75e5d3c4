-- errands schema version 17: a placeholder on the activity branch only, so that version 18
-- (the operator activity log) applies in order; another branch brings the real one.
SELECT 1;
