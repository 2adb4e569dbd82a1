-- perdure schema, version 23: batches of emitted events start one run.
--
-- A workflow's trigger may ask for batches (`EventTrigger(name, match,
-- batch_size=, batch_window=)`): the matching events gather in one run until
-- batch_size of them are in it or batch_window has passed since its first
-- event, and the run's input is the list of the events (each the record a
-- wait receives: id, name, key, payload, emitted_at).
--
-- A batch is a run from its first event on: emit_event starts it with that
-- event as its input and its task due at the window's end, and the workers'
-- due-task timers start it then, as any delayed start, with no further event
-- needed. Each later matching event is appended to the input of the open
-- batch (event_batches: one row per batched workflow, naming that run) while
-- its task is still ready: the emitter locks the batch's row, then the run's
-- ready task, so no worker claims the run while the event goes in, and an
-- emitter that finds the task claimed (the window ended), gone or paused
-- opens the next batch instead. The batch that reaches its size, or would
-- outgrow the payload limit, is made due now. Every step is in the emitter's
-- transaction: an event is in exactly one batch, or (rolled back) in none.

-- A trigger's batching (both NULL: each event starts its own run). Every
-- trigger of a workflow has the same (the App checks it).
ALTER TABLE event_triggers ADD COLUMN batch_size integer
    CHECK (batch_size BETWEEN 1 AND 10000);
ALTER TABLE event_triggers ADD COLUMN batch_window float8
    CHECK (batch_window > 0 AND batch_window <= 86400);
ALTER TABLE event_triggers ADD CONSTRAINT event_triggers_batch_check
    CHECK ((batch_size IS NULL) = (batch_window IS NULL));

-- The open batch of each batched workflow: the run that takes its next
-- events. No foreign key: a batch run deleted meanwhile simply is not open
-- any more (its task is gone), and the next event opens a new one.
CREATE TABLE event_batches (
    workflow  text        PRIMARY KEY,
    run_id    uuid        NOT NULL,
    opened_at timestamptz NOT NULL
);

-- event_batch_add: put event p_event (its record; id p_event_id) in the open
-- batch of workflow p_workflow, or open a batch with it: a run keyed
-- `event-batch:<event id>:<workflow>` due after p_window seconds. Returns the
-- batch's run id (NULL: the workflow is not registered, nothing started).
CREATE FUNCTION event_batch_add(
    p_workflow text, p_event_id bigint, p_event jsonb, p_size integer, p_window float8,
    p_now timestamptz, p_max_bytes integer
) RETURNS uuid
LANGUAGE plpgsql
AS $$
DECLARE
    v_open   uuid;
    v_task   bigint;
    v_count  integer;
    v_new    uuid;
    v_random text;
    v_run    record;
    v_bytes  integer := octet_length(p_event::text);
BEGIN
    FOR v_try IN 1..20 LOOP
        SELECT b.run_id INTO v_open FROM event_batches b WHERE b.workflow = p_workflow FOR UPDATE;
        IF FOUND THEN
            -- The open batch's task, still ready (its window runs): locked, so no
            -- worker claims the run until this transaction ends.
            SELECT t.id INTO v_task FROM tasks t
            WHERE t.run_id = v_open AND t.kind = 'run' AND t.status = 'ready'
            FOR UPDATE;
            IF FOUND THEN
                UPDATE runs r SET input = r.input || jsonb_build_array(p_event), updated_at = p_now
                WHERE r.id = v_open AND r.status = 'queued' AND r.started_at IS NULL
                  AND jsonb_typeof(r.input) = 'array'
                  AND octet_length(r.input::text) + v_bytes + 2 <= p_max_bytes
                RETURNING jsonb_array_length(r.input) INTO v_count;
                IF FOUND THEN
                    INSERT INTO event_deliveries (event_id, run_id, position, delivered_at)
                    VALUES (p_event_id, v_open, NULL, p_now) ON CONFLICT DO NOTHING;
                    IF v_count >= p_size THEN
                        -- Full: it starts now, and the next event opens the next batch.
                        UPDATE tasks SET available_at = p_now
                        WHERE id = v_task AND available_at > p_now;
                        DELETE FROM event_batches WHERE workflow = p_workflow;
                    END IF;
                    RETURN v_open;
                END IF;
                -- Full by its bytes (or no longer a batch): it starts now, and this
                -- event opens the next batch.
                UPDATE tasks SET available_at = p_now WHERE id = v_task AND available_at > p_now;
            END IF;
            v_random := replace(gen_random_uuid()::text, '-', '');
            v_new := (lpad(to_hex((extract(epoch FROM clock_timestamp()) * 1000)::bigint), 12, '0')
                      || '7' || substr(v_random, 14, 3) || substr(v_random, 17))::uuid;
            UPDATE event_batches SET run_id = v_new, opened_at = p_now
            WHERE workflow = p_workflow;
        ELSE
            v_random := replace(gen_random_uuid()::text, '-', '');
            v_new := (lpad(to_hex((extract(epoch FROM clock_timestamp()) * 1000)::bigint), 12, '0')
                      || '7' || substr(v_random, 14, 3) || substr(v_random, 17))::uuid;
            -- Another emitter may be opening the same batch: the one that
            -- inserts the row opens it, the other looks again once it commits.
            INSERT INTO event_batches (workflow, run_id, opened_at)
            VALUES (p_workflow, v_new, p_now)
            ON CONFLICT (workflow) DO NOTHING;
            CONTINUE WHEN NOT FOUND;
        END IF;
        SELECT * INTO v_run FROM insert_run(
            v_new, p_workflow, 0, NULL, 'event-batch:' || p_event_id || ':' || p_workflow,
            jsonb_build_array(p_event), p_now, 0, CASE WHEN p_size <= 1 THEN 0 ELSE p_window END,
            NULL, NULL, NULL, NULL,
            jsonb_build_object('event', p_event ->> 'name', 'event_batch', p_event_id::text),
            NULL, true, true);
        IF v_run.id IS NULL OR NOT v_run.created OR p_size <= 1 THEN
            DELETE FROM event_batches WHERE workflow = p_workflow;
        END IF;
        IF v_run.id IS NULL OR NOT v_run.created THEN
            RETURN NULL;
        END IF;
        INSERT INTO event_deliveries (event_id, run_id, position, delivered_at)
        VALUES (p_event_id, v_run.id, NULL, p_now) ON CONFLICT DO NOTHING;
        RETURN v_run.id;
    END LOOP;
    RAISE EXCEPTION 'the batch of workflow % could not be opened: try again', p_workflow
        USING ERRCODE = '40001';
END
$$;

-- emit_event, the internal form, as in migration 0020, but a batched
-- trigger puts the event in its workflow's batch (event_batch_add) instead
-- of starting a run of its own. `started` counts the runs the event started
-- or joined.
CREATE OR REPLACE FUNCTION emit_event(
    p_name text, p_payload jsonb, p_key text, p_now timestamptz, p_max_bytes integer
) RETURNS TABLE (id bigint, created boolean, woke integer, started integer)
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
    v_id      bigint;
    v_now     timestamptz := check_time('now', coalesce(p_now, clock_timestamp()));
    v_payload jsonb;
    v_anchors text[];
    v_event   jsonb;
    v_woke    integer := 0;
    v_started integer := 0;
    v_trigger record;
    v_random  text;
    v_run     record;
BEGIN
    IF p_name IS NULL OR p_name !~ '^[A-Za-z_][A-Za-z0-9_.:\-]{0,127}$' THEN
        RAISE EXCEPTION 'invalid event name %: use 1-128 letters, digits, ''_'', ''.'', '
                        ''':'' or ''-'', starting with a letter or ''_''', coalesce(p_name, 'NULL')
            USING ERRCODE = '22023';
    END IF;
    PERFORM check_text('event key', p_key, 512);
    IF p_max_bytes IS NULL OR p_max_bytes NOT BETWEEN 1 AND 134217728 THEN
        RAISE EXCEPTION 'the payload limit must be 1 to 134217728 bytes, not %', p_max_bytes
            USING ERRCODE = '22023';
    END IF;
    v_payload := check_json('the event''s payload', coalesce(p_payload, '{}'::jsonb), p_max_bytes);
    PERFORM pg_advisory_xact_lock_shared(event_lock_key(p_name));
    INSERT INTO emitted_events (name, key, payload, emitted_at)
    VALUES (p_name, p_key, v_payload, v_now)
    ON CONFLICT (name, key) DO NOTHING
    RETURNING emitted_events.id INTO v_id;
    IF v_id IS NULL THEN
        SELECT e.id INTO v_id FROM emitted_events e WHERE e.name = p_name AND e.key = p_key;
        RETURN QUERY SELECT v_id, false, 0, 0;
        RETURN;
    END IF;
    v_anchors := array_append(event_anchors(v_payload), '');
    v_event := jsonb_build_object('id', v_id, 'name', p_name, 'key', p_key,
                                  'payload', v_payload, 'emitted_at', v_now);
    -- The waits are locked in one order by every emitter: two emits of one
    -- name wait for each other instead of deadlocking.
    WITH matched AS (
        SELECT w.run_id, w.position
        FROM event_waits w JOIN runs r ON r.id = w.run_id
        WHERE w.name = p_name AND w.anchor = ANY (v_anchors) AND v_payload @> w.match
          AND r.status = 'waiting'
        ORDER BY w.run_id, w.position
        FOR UPDATE OF w
    ), taken AS (
        DELETE FROM event_waits w USING matched m
        WHERE w.run_id = m.run_id AND w.position = m.position
        RETURNING w.run_id, w.position
    ), delivered AS (
        INSERT INTO event_deliveries (event_id, run_id, position, delivered_at)
        SELECT v_id, t.run_id, t.position, v_now FROM taken t
        ON CONFLICT DO NOTHING
        RETURNING run_id, position
    ), completed AS (
        UPDATE steps s SET status = 'completed', output = v_event, completed_at = v_now
        FROM delivered d
        WHERE s.run_id = d.run_id AND s.position = d.position AND s.status = 'waiting'
        RETURNING s.run_id, s.position, s.name
    ), logged AS (
        INSERT INTO history (run_id, at, event, step_position, step_name, detail)
        SELECT c.run_id, v_now, 'event_consumed', c.position, c.name,
               jsonb_build_object('event_id', v_id, 'name', p_name)
        FROM completed c
    ), due AS (
        UPDATE tasks t SET available_at = v_now
        FROM completed c
        WHERE t.run_id = c.run_id AND t.kind = 'run' AND t.status = 'ready'
    )
    SELECT count(*) INTO v_woke FROM completed;
    -- The workflows this event starts: one run each, keyed by the event.
    -- A batched workflow's events gather in its open batch (event_batch_add).
    FOR v_trigger IN
        SELECT g.workflow, min(g.batch_size) AS batch_size, min(g.batch_window) AS batch_window
        FROM event_triggers g
        WHERE g.name = p_name AND g.anchor = ANY (v_anchors) AND v_payload @> g.match
        GROUP BY g.workflow
        ORDER BY g.workflow
    LOOP
        IF v_trigger.batch_size IS NOT NULL THEN
            IF event_batch_add(v_trigger.workflow, v_id, v_event, v_trigger.batch_size,
                               v_trigger.batch_window, v_now, p_max_bytes) IS NOT NULL THEN
                v_started := v_started + 1;
            END IF;
            CONTINUE;
        END IF;
        v_random := replace(gen_random_uuid()::text, '-', '');
        SELECT * INTO v_run FROM insert_run(
            (lpad(to_hex((extract(epoch FROM clock_timestamp()) * 1000)::bigint), 12, '0')
             || '7' || substr(v_random, 14, 3) || substr(v_random, 17))::uuid,
            v_trigger.workflow, 0, NULL, 'event:' || v_id || ':' || v_trigger.workflow,
            v_payload, v_now, 0, 0, NULL, NULL, NULL, NULL,
            jsonb_build_object('event', p_name, 'event_id', v_id::text), NULL, true, true);
        IF v_run.id IS NOT NULL AND v_run.created THEN
            INSERT INTO event_deliveries (event_id, run_id, position, delivered_at)
            VALUES (v_id, v_run.id, NULL, v_now) ON CONFLICT DO NOTHING;
            v_started := v_started + 1;
        END IF;
    END LOOP;
    RETURN QUERY SELECT v_id, true, v_woke, v_started;
END
$$;
