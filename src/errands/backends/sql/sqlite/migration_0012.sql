-- errands schema version 12: reserved for issue #33 (durable steps, branch `steps`), which
-- writes this file. It stands here, empty, only because migrations must be numbered 1..n and
-- issue #38's migration is 0013; at the merge, #33's file replaces this one.
SELECT 1;
