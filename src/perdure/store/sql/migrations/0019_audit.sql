-- perdure schema, version 19: reserved for the audit migration, which replaces
-- this file; on its own it changes nothing.
SELECT 1;
