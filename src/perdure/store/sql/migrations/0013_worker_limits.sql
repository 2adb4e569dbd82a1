-- perdure schema, version 13: what a worker cannot give back, and how often a
-- run's lease may lapse.
--
-- workers.stuck_threads: threads of the worker still running a plain `def`
-- step its caller gave up on (a timeout, a lost lease). Python cannot stop
-- them; each holds a slot of the worker until it returns, and the dashboard
-- shows them.
--
-- workflows.max_lapses: how many times a task of this workflow's runs may
-- have its lease lapse before the reaper dead-letters it. Stored with the
-- definition, so that every worker's reaper applies the same threshold.

ALTER TABLE workers ADD COLUMN stuck_threads integer NOT NULL DEFAULT 0;

ALTER TABLE workflows ADD COLUMN max_lapses integer NOT NULL DEFAULT 5
    CHECK (max_lapses >= 1);

-- Wake callers waiting in app.get_event / app.read_stream the moment a run
-- publishes: NOTIFY <schema>_messages with the run's id, once per statement
-- that wrote events or stream values of it (identical payloads fold).
CREATE FUNCTION notify_message() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(TG_TABLE_SCHEMA || '_messages', NEW.run_id::text);
    RETURN NULL;
END
$$;

CREATE TRIGGER events_notify AFTER INSERT OR UPDATE ON events
    FOR EACH ROW EXECUTE FUNCTION notify_message();

CREATE TRIGGER streams_notify AFTER INSERT ON streams
    FOR EACH ROW EXECUTE FUNCTION notify_message();
