-- perdure schema, version 29: many events at once (app.emit_many, emit_events
-- in SQL), and wake-up notifications an emitter sends after its commit.
--
-- Notifications after the commit. PostgreSQL commits notifying transactions
-- one at a time: a transaction that NOTIFYs takes a database-wide lock before
-- its commit and holds it through its WAL flush. Every emit that woke a run
-- used to NOTIFY in its own transaction, so emitters waited for each other's
-- flushes. Now a transaction may set `perdure.deferred_wakeups` (locally, to
-- a newline): the tasks' trigger then lists the queues it would have notified in
-- that setting instead, and the emitter (app.emit without conn=) reads them
-- before its commit and notifies them in a transaction of its own after it,
-- which writes nothing else and so waits for no flush. An emitter that dies
-- between the two leaves due tasks that no notification announced: the
-- workers' fallback poll (WorkerOptions.idle_poll_seconds) finds them. The
-- SQL functions and an emit in the caller's transaction (conn=, the outbox)
-- set nothing and notify at their commit, as before.
--
-- Many events at once: emit_events takes a JSON array of events and records
-- each as emit_event does, in one transaction, all or none. emit_event's
-- steps are functions of their own here (event_checked, event_record, the
-- three kinds of delivery and event_woke), which both call.

-- The setting holds a newline, then each queue followed by a newline (queue
-- names have none); any other value (unset, '', something else) notifies as
-- before, so no value a session leaves behind can make the trigger fail.
CREATE OR REPLACE FUNCTION notify_task_ready() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_deferred text := current_setting('perdure.deferred_wakeups', true);
BEGIN
    IF v_deferred IS NULL OR left(v_deferred, 1) <> E'\n' THEN
        PERFORM pg_notify(TG_TABLE_SCHEMA || '_wakeup', NEW.queue);
    ELSIF strpos(v_deferred, E'\n' || NEW.queue || E'\n') = 0 THEN
        PERFORM set_config('perdure.deferred_wakeups', v_deferred || NEW.queue || E'\n', true);
    END IF;
    RETURN NULL;
END
$$;

-- event_checked: the payload of event p_name (NULL: {}) once name, key,
-- payload and payload limit are checked; raises 22023 on the first bad one.
CREATE FUNCTION event_checked(p_name text, p_payload jsonb, p_key text, p_max_bytes integer)
RETURNS jsonb
LANGUAGE plpgsql
AS $$
BEGIN
    IF p_name IS NULL OR p_name !~ '^[A-Za-z_][A-Za-z0-9_.:\-]{0,127}$' THEN
        RAISE EXCEPTION 'invalid event name %: use 1-128 letters, digits, ''_'', ''.'', '
                        ''':'' or ''-'', starting with a letter or ''_''',
                        coalesce(left(p_name, 200), 'NULL')
            USING ERRCODE = '22023';
    END IF;
    PERFORM check_text('event key', p_key, 512);
    IF p_max_bytes IS NULL OR p_max_bytes NOT BETWEEN 1 AND 134217728 THEN
        RAISE EXCEPTION 'the payload limit must be 1 to 134217728 bytes, not %', p_max_bytes
            USING ERRCODE = '22023';
    END IF;
    RETURN check_json('the event''s payload', coalesce(p_payload, '{}'::jsonb), p_max_bytes);
END
$$;

-- event_woke: what each step an event completed costs, wherever it waited:
-- an `event_consumed` history entry for the step (p_runs, p_positions,
-- p_steps, one element each), and its run's task made due now. How many.
CREATE FUNCTION event_woke(
    p_id bigint, p_name text, p_now timestamptz,
    p_runs uuid[], p_positions integer[], p_steps text[]
) RETURNS integer
LANGUAGE plpgsql
AS $$
BEGIN
    INSERT INTO history (run_id, at, event, step_position, step_name, detail)
    SELECT w.run_id, p_now, 'event_consumed', w.position, w.step,
           jsonb_build_object('event_id', p_id, 'name', p_name)
    FROM unnest(p_runs, p_positions, p_steps) AS w (run_id, position, step);
    UPDATE tasks t SET available_at = p_now
    WHERE t.run_id = ANY (p_runs) AND t.kind = 'run' AND t.status = 'ready';
    RETURN cardinality(p_runs);
END
$$;

-- event_deliver_waits: complete every parked ctx.wait_for_event on p_name
-- whose match the payload contains with event p_event (its id p_id) and
-- record the deliveries; the steps completed. The waits are locked in one
-- order by every emitter: two emits of one name wait for each other instead
-- of deadlocking.
CREATE FUNCTION event_deliver_waits(
    p_id bigint, p_name text, p_payload jsonb, p_anchors text[], p_event jsonb, p_now timestamptz
) RETURNS TABLE (woken_run uuid, woken_position integer, woken_step text)
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH matched AS (
        SELECT w.run_id, w.position
        FROM event_waits w JOIN runs r ON r.id = w.run_id
        WHERE w.name = p_name AND w.anchor = ANY (p_anchors) AND p_payload @> w.match
          AND r.status = 'waiting'
        ORDER BY w.run_id, w.position
        FOR UPDATE OF w
    ), taken AS (
        DELETE FROM event_waits w USING matched m
        WHERE w.run_id = m.run_id AND w.position = m.position
        RETURNING w.run_id, w.position
    ), delivered AS (
        INSERT INTO event_deliveries (event_id, run_id, position, delivered_at)
        SELECT p_id, t.run_id, t.position, p_now FROM taken t
        ON CONFLICT DO NOTHING
        RETURNING run_id, position
    ), completed AS (
        UPDATE steps s SET status = 'completed', output = p_event, completed_at = p_now
        FROM delivered d
        WHERE s.run_id = d.run_id AND s.position = d.position AND s.status = 'waiting'
        RETURNING s.run_id, s.position, s.name
    )
    SELECT c.run_id, c.position, c.name FROM completed c;
END
$$;

-- event_complete_races: the races (ctx.wait_first, ctx.wait_all) with a
-- member event p_event matches: the first such member (in the race's order)
-- wins, its race checkpoint is completed with the member's name and the
-- event, and the delivery recorded; the steps completed. The race's checkpoint row is
-- the one locked, in one order by every emitter: of two events that match
-- members of one race the second finds it completed and records nothing
-- (that event stays free for a later wait). The members' rows are removed by
-- the worker.
CREATE FUNCTION event_complete_races(
    p_id bigint, p_name text, p_payload jsonb, p_anchors text[], p_event jsonb, p_now timestamptz
) RETURNS TABLE (woken_run uuid, woken_position integer, woken_step text)
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH matched AS (
        SELECT w.run_id, w.position, w.ord, w.member
        FROM race_event_waits w
        JOIN runs r ON r.id = w.run_id
        JOIN steps s ON s.run_id = w.run_id AND s.position = w.position
        WHERE w.name = p_name AND w.anchor = ANY (p_anchors) AND p_payload @> w.match
          AND r.status = 'waiting' AND s.status = 'waiting' AND s.kind = 'race'
        ORDER BY w.run_id, w.position, w.ord
        FOR UPDATE OF s
    ), chosen AS (
        SELECT DISTINCT ON (m.run_id, m.position) m.run_id, m.position, m.member
        FROM matched m
        WHERE NOT EXISTS (SELECT 1 FROM event_deliveries d
                          WHERE d.event_id = p_id AND d.run_id = m.run_id)
        ORDER BY m.run_id, m.position, m.ord
    ), completed AS (
        UPDATE steps s
        SET status = 'completed', completed_at = p_now,
            output = jsonb_build_object('winner', c.member, 'value', p_event)
        FROM chosen c
        WHERE s.run_id = c.run_id AND s.position = c.position AND s.status = 'waiting'
        RETURNING s.run_id, s.position, s.name
    ), delivered AS (
        INSERT INTO event_deliveries (event_id, run_id, position, delivered_at)
        SELECT p_id, c.run_id, c.position, p_now FROM completed c
        ON CONFLICT DO NOTHING
    )
    SELECT c.run_id, c.position, c.name FROM completed c;
END
$$;

-- event_start_triggered: the workflows event p_event starts: one run each,
-- keyed `event:<event id>:<workflow>`; a batched workflow's events gather in
-- its open batch (event_batch_add, migration 0023). How many runs it started
-- or joined.
CREATE FUNCTION event_start_triggered(
    p_id bigint, p_name text, p_payload jsonb, p_anchors text[], p_event jsonb,
    p_now timestamptz, p_max_bytes integer
) RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    v_started integer := 0;
    v_trigger record;
    v_random  text;
    v_run     record;
BEGIN
    FOR v_trigger IN
        SELECT g.workflow, min(g.batch_size) AS batch_size, min(g.batch_window) AS batch_window
        FROM event_triggers g
        WHERE g.name = p_name AND g.anchor = ANY (p_anchors) AND p_payload @> g.match
        GROUP BY g.workflow
        ORDER BY g.workflow
    LOOP
        IF v_trigger.batch_size IS NOT NULL THEN
            IF event_batch_add(v_trigger.workflow, p_id, p_event, v_trigger.batch_size,
                               v_trigger.batch_window, p_now, p_max_bytes) IS NOT NULL THEN
                v_started := v_started + 1;
            END IF;
            CONTINUE;
        END IF;
        v_random := replace(gen_random_uuid()::text, '-', '');
        SELECT * INTO v_run FROM insert_run(
            (lpad(to_hex((extract(epoch FROM clock_timestamp()) * 1000)::bigint), 12, '0')
             || '7' || substr(v_random, 14, 3) || substr(v_random, 17))::uuid,
            v_trigger.workflow, 0, NULL, 'event:' || p_id || ':' || v_trigger.workflow,
            p_payload, p_now, 0, 0, NULL, NULL, NULL, NULL,
            jsonb_build_object('event', p_name, 'event_id', p_id::text), NULL, true, true);
        IF v_run.id IS NOT NULL AND v_run.created THEN
            INSERT INTO event_deliveries (event_id, run_id, position, delivered_at)
            VALUES (p_id, v_run.id, NULL, p_now) ON CONFLICT DO NOTHING;
            v_started := v_started + 1;
        END IF;
    END LOOP;
    RETURN v_started;
END
$$;

-- event_record: record event p_name with its checked payload (event_checked)
-- once per key, then wake its waits, complete its races and start its
-- triggers' runs. Returns the event's id, whether it was recorded now (false:
-- the key was emitted before: nothing woken or started), and how many runs it
-- woke and started.
CREATE FUNCTION event_record(
    p_name text, p_payload jsonb, p_key text, p_now timestamptz, p_max_bytes integer
) RETURNS TABLE (id bigint, created boolean, woke integer, started integer)
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
    v_id        bigint;
    v_anchors   text[];
    v_event     jsonb;
    v_runs      uuid[];
    v_positions integer[];
    v_steps     text[];
BEGIN
    PERFORM pg_advisory_xact_lock_shared(event_lock_key(p_name));
    INSERT INTO emitted_events (name, key, payload, emitted_at)
    VALUES (p_name, p_key, p_payload, p_now)
    ON CONFLICT (name, key) DO NOTHING
    RETURNING emitted_events.id INTO v_id;
    IF v_id IS NULL THEN
        SELECT e.id INTO v_id FROM emitted_events e WHERE e.name = p_name AND e.key = p_key;
        RETURN QUERY SELECT v_id, false, 0, 0;
        RETURN;
    END IF;
    v_anchors := array_append(event_anchors(p_payload), '');
    v_event := jsonb_build_object('id', v_id, 'name', p_name, 'key', p_key,
                                  'payload', p_payload, 'emitted_at', p_now);
    -- The waits first, then the races: an event a wait of a run took is not
    -- also that run's race winner (event_complete_races looks for it).
    SELECT coalesce(array_agg(w.woken_run), '{}'), coalesce(array_agg(w.woken_position), '{}'),
           coalesce(array_agg(w.woken_step), '{}')
    INTO v_runs, v_positions, v_steps
    FROM event_deliver_waits(v_id, p_name, p_payload, v_anchors, v_event, p_now) w;
    SELECT v_runs || coalesce(array_agg(w.woken_run), '{}'),
           v_positions || coalesce(array_agg(w.woken_position), '{}'),
           v_steps || coalesce(array_agg(w.woken_step), '{}')
    INTO v_runs, v_positions, v_steps
    FROM event_complete_races(v_id, p_name, p_payload, v_anchors, v_event, p_now) w;
    RETURN QUERY SELECT v_id, true,
        event_woke(v_id, p_name, p_now, v_runs, v_positions, v_steps),
        event_start_triggered(v_id, p_name, p_payload, v_anchors, v_event, p_now, p_max_bytes);
END
$$;

-- emit_event, the internal form (migrations 0020, 0023, 0025): checked, then
-- recorded with its deliveries by the functions above.
CREATE OR REPLACE FUNCTION emit_event(
    p_name text, p_payload jsonb, p_key text, p_now timestamptz, p_max_bytes integer
) RETURNS TABLE (id bigint, created boolean, woke integer, started integer)
LANGUAGE plpgsql
AS $$
DECLARE
    v_now     timestamptz := check_time('now', coalesce(p_now, clock_timestamp()));
    v_payload jsonb := event_checked(p_name, p_payload, p_key, p_max_bytes);
BEGIN
    RETURN QUERY SELECT * FROM event_record(p_name, v_payload, p_key, v_now, p_max_bytes);
END
$$;

-- emit_events, the internal form (app.emit_many): the JSON array p_events of
-- objects {"name": text, "payload": any JSON (default {}), "key": text or
-- null}, at most p_max_events of them, each recorded as emit_event records
-- one, in order, in the caller's transaction: all or none. Every element is
-- checked before anything is written; a bad one raises 22023 naming its index
-- (from 0). A key given twice (per name), in the call or before it, records
-- one event: the later ones answer the first's id with created false. The
-- keys of the call are locked first, in one order (an advisory lock on each
-- name and key, apart from the name locks): concurrent calls with keys in
-- common wait for each other instead of deadlocking on the keys' index.
-- Returns one row per element: its index, the event's id, created, woke and
-- started.
CREATE FUNCTION emit_events(
    p_events jsonb, p_now timestamptz, p_max_bytes integer, p_max_events integer
) RETURNS TABLE (index integer, id bigint, created boolean, woke integer, started integer)
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
    v_now     timestamptz := check_time('now', coalesce(p_now, clock_timestamp()));
    v_count   integer;
    v_index   integer := 0;
    v_item    jsonb;
    v_names   text[] := '{}';
    v_keys    text[] := '{}';
    v_loads   jsonb[] := '{}';
    v_at      timestamptz;
BEGIN
    IF p_events IS NULL OR jsonb_typeof(p_events) <> 'array' THEN
        RAISE EXCEPTION 'the events must be a JSON array of objects, not %',
                        coalesce(jsonb_typeof(p_events), 'NULL')
            USING ERRCODE = '22023';
    END IF;
    v_count := jsonb_array_length(p_events);
    IF p_max_events IS NULL OR v_count > p_max_events THEN
        RAISE EXCEPTION '% events in one call: at most % at once', v_count, p_max_events
            USING ERRCODE = '22023';
    END IF;
    -- Every element checked before anything is written; the first bad one is
    -- named by its index.
    BEGIN
        FOR v_item IN SELECT value FROM jsonb_array_elements(p_events) LOOP
            IF jsonb_typeof(v_item) <> 'object' THEN
                RAISE EXCEPTION 'not a JSON object but %', jsonb_typeof(v_item)
                    USING ERRCODE = '22023';
            END IF;
            IF EXISTS (SELECT 1 FROM jsonb_object_keys(v_item) k
                       WHERE k NOT IN ('name', 'payload', 'key')) THEN
                RAISE EXCEPTION 'an event has "name", "payload" and "key" only, not %',
                    (SELECT string_agg(quote_literal(left(k, 100)), ', ')
                     FROM jsonb_object_keys(v_item) k WHERE k NOT IN ('name', 'payload', 'key'))
                    USING ERRCODE = '22023';
            END IF;
            IF jsonb_typeof(v_item -> 'name') IS DISTINCT FROM 'string' THEN
                RAISE EXCEPTION 'its "name" must be a string' USING ERRCODE = '22023';
            END IF;
            IF coalesce(jsonb_typeof(v_item -> 'key'), 'null') NOT IN ('string', 'null') THEN
                RAISE EXCEPTION 'its "key" must be a string or null' USING ERRCODE = '22023';
            END IF;
            v_names := v_names || (v_item ->> 'name');
            v_keys := v_keys || (v_item ->> 'key');
            v_loads := v_loads || event_checked(v_item ->> 'name', v_item -> 'payload',
                                                v_item ->> 'key', p_max_bytes);
            v_index := v_index + 1;
        END LOOP;
    EXCEPTION WHEN invalid_parameter_value OR program_limit_exceeded OR untranslatable_character
                   OR character_not_in_repertoire THEN
        RAISE EXCEPTION 'event % of the call: %', v_index, SQLERRM USING ERRCODE = SQLSTATE;
    END;
    PERFORM pg_advisory_xact_lock((('emitted_events'::regclass)::oid::bigint - 2147483648)::integer,
                                  hashtext(k.name || chr(10) || k.key))
    FROM (SELECT DISTINCT n AS name, k AS key
          FROM unnest(v_names, v_keys) AS u (n, k) WHERE k IS NOT NULL
          ORDER BY 1, 2) k;
    FOR v_index IN 1 .. v_count LOOP
        v_at := CASE WHEN p_now IS NULL THEN clock_timestamp() ELSE v_now END;
        RETURN QUERY SELECT v_index - 1, r.id, r.created, r.woke, r.started
                     FROM event_record(v_names[v_index], v_loads[v_index], v_keys[v_index],
                                       v_at, p_max_bytes) r;
    END LOOP;
END
$$;

-- emit_events: the public form, for any language: a JSON array of up to
-- 10,000 events {"name", "payload", "key"}, each payload held to 1 MiB as
-- emit_event holds one, recorded in one transaction; the server's clock
-- stamps them. Returns the events' ids in the array's order (a key given
-- again answers the first event's id). SECURITY DEFINER, its search_path
-- pinned with the temporary schema last (as emit_event's, migration 0020).
CREATE FUNCTION emit_events(p_events jsonb)
RETURNS bigint[]
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
BEGIN
    RETURN (SELECT coalesce(array_agg(e.id ORDER BY e.index), '{}')
            FROM emit_events(p_events, NULL, 1048576, 10000) e);
END
$$;

DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION emit_events(jsonb) '
                   'SET search_path = pg_catalog, %I, pg_temp', current_schema());
END
$$;
