-- errands schema version 19 (SQLite): a placeholder. Version 19 belongs to another branch
-- of the same release; when that branch is merged, its migration_0019.sql replaces this file.
SELECT 1;
