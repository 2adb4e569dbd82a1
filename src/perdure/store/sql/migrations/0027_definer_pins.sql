-- perdure schema, version 27: every SECURITY DEFINER function's search_path
-- pinned in the migrations themselves, the temporary schema last.
--
-- The migrator pins every function of the schema after each migration
-- (perdure.store.migrate.pin_functions), so databases already had these
-- paths; this migration writes the pin down where an auditor reads the SQL.
-- Each function below is a SECURITY DEFINER whose latest definition set no
-- search_path of its own:
--   * start_run, send_signal (the public form), cancel_run, pause_run,
--     resume_run, history_partitions_ensure and history_partition_drop were
--     (re)created in migration 0017 with SECURITY DEFINER and no path;
--   * get_event and read_stream were made definers by ALTER in 0017; their
--     `SET search_path FROM CURRENT` (migration 0011) took the migrator's
--     path of that time, the schema alone, which searches pg_temp first.
-- The path is pg_catalog, <schema>, pg_temp: nothing of pg_temp stands in
-- for a table or function of the schema inside a definer. Bodies are left
-- as they are. tests/unit/test_definer_pins.py reads every migration and
-- fails on a definer without such a pin.

DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION start_run(text, jsonb, text, integer, interval, integer, '
                   'jsonb, text, text, interval) '
                   'SET search_path = pg_catalog, %I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION send_signal(text, text, jsonb, text) '
                   'SET search_path = pg_catalog, %I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION cancel_run(text, text) '
                   'SET search_path = pg_catalog, %I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION pause_run(text) '
                   'SET search_path = pg_catalog, %I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION resume_run(text) '
                   'SET search_path = pg_catalog, %I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION history_partitions_ensure(timestamptz, integer) '
                   'SET search_path = pg_catalog, %I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION history_partition_drop(timestamptz) '
                   'SET search_path = pg_catalog, %I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION get_event(text, text) '
                   'SET search_path = pg_catalog, %I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION read_stream(text, text, integer, integer) '
                   'SET search_path = pg_catalog, %I, pg_temp', current_schema());
END
$$;
