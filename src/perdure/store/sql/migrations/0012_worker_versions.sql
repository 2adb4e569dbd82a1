-- perdure schema, version 11: which code each worker runs.
--
-- A worker records the schema version its code was written for and its
-- perdure release, so that `perdure migrate --plan` can say whether the live
-- workers are compatible with the migrations it is about to apply. Nullable
-- columns without a default: adding them only changes the catalog (a brief
-- ACCESS EXCLUSIVE lock, no rewrite). Workers of older releases leave them NULL.

ALTER TABLE workers ADD COLUMN schema_version integer, ADD COLUMN release text;
