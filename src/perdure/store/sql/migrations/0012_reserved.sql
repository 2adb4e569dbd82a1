-- perdure schema, version 12: this number is taken by another migration
-- (bulk start); this empty file keeps the numbers contiguous until it lands.
SELECT 1;
