-- errands schema version 14: a placeholder on the fair branch only, so that version 15 (fair
-- share) applies in order; another branch brings the real one.
SELECT 1;
