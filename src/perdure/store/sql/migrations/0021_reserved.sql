-- perdure schema, version 21: reserved; this version changes nothing.
SELECT 1;
