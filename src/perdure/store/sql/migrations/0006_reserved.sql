-- Placeholder on branch 'manage' only: number 0006 belongs to another branch's
-- migration. Delete this file when that migration is merged.
SELECT 1;
