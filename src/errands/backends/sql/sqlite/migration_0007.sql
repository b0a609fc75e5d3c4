-- errands schema version 7: a placeholder for issue #21's migration 0007 (one truth), which
-- lands on main separately; this branch (flow, #23) adds 0008. Replaced by #21's file at merge.
SELECT 1;
