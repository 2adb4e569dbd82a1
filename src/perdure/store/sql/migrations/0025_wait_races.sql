-- perdure schema, version 25: races and joins of waits (ctx.wait_first,
-- ctx.wait_all; docs/races.md).
--
-- A race waits for the first of several members: signals by name, emitted
-- events (name and match), timers, child runs, updates. It is one checkpoint
-- of kind 'race' at its position, parked like any wait ('waiting', with the
-- earliest timer as its wake time) and completed with the winner, recorded as
-- {"winner": <member name>, "value": <its value>}. A replay returns the
-- recorded winner; nothing of a losing member is consumed.
--
-- What wakes a parked race, in the transaction of what happened:
--   * a signal: send_signal (below) makes the run's task due when the run's
--     waiting_for lists the name under "signals" (the run's row lock orders
--     it against the worker parking, as for ctx.wait_for_signal); the worker
--     then consumes the signal for the race;
--   * an event: emit_event (below) completes the race's checkpoint with the
--     first member it matches, under the event name's lock, as for
--     ctx.wait_for_event; each event member of a parked race is a row of
--     race_event_waits, indexed like event_waits;
--   * a child run's end: run_finished (migration 0003) already wakes a parent
--     whose waiting_for has "child";
--   * an update: request_update (migration 0021) already wakes a waiting run;
--   * a timer: the task's due time.

ALTER TABLE steps DROP CONSTRAINT steps_kind_check;
ALTER TABLE steps ADD CONSTRAINT steps_kind_check CHECK (kind IN
    ('step', 'transaction', 'sleep', 'signal', 'event', 'stream', 'gather', 'child',
     'child_result', 'compensation', 'event_wait', 'race')) NOT VALID;

-- The event members of a parked race: one row each, in the race's order
-- (ord), filed under the event name and its match's anchor (migration 0020).
-- The rows live while the race is parked; the worker removes them when the
-- race completes or times out (a row whose race is no longer waiting matches
-- nothing).
CREATE TABLE race_event_waits (
    run_id   uuid        NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    position integer     NOT NULL,
    ord      integer     NOT NULL,
    member   text        NOT NULL,
    name     text        NOT NULL,
    match    jsonb       NOT NULL,
    anchor   text        NOT NULL,
    since    timestamptz NOT NULL,
    PRIMARY KEY (run_id, position, ord)
);
CREATE INDEX race_event_waits_anchor_idx ON race_event_waits (name, anchor);

-- send_signal (migration 0022) also wakes a run parked at a race that has a
-- member waiting for the signal's name (waiting_for -> 'signals').
CREATE OR REPLACE FUNCTION send_signal(
    p_run text, p_name text, p_payload jsonb, p_key text, p_now timestamptz
) RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
    v_run      runs%ROWTYPE;
    v_id       bigint;
    v_now      timestamptz := check_time('now', coalesce(p_now, now()));
    v_task     bigint;
    v_position integer;
    v_taken    bigint;
    v_payload  jsonb;
BEGIN
    IF p_name IS NULL OR p_name = '' THEN
        RAISE EXCEPTION 'a signal needs a name' USING ERRCODE = '22023';
    END IF;
    PERFORM check_text('signal name', p_name, 128);
    PERFORM check_text('signal key', p_key, 512);
    PERFORM check_json('the signal''s payload', p_payload, 134217728);
    IF p_run ~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' THEN
        SELECT * INTO v_run FROM runs WHERE id = p_run::uuid FOR UPDATE;
    END IF;
    IF v_run.id IS NULL THEN
        SELECT * INTO v_run FROM runs WHERE key = p_run FOR UPDATE;
    END IF;
    IF v_run.id IS NULL THEN
        RAISE EXCEPTION 'no run with id or key %', p_run USING ERRCODE = 'P0002';
    END IF;
    IF v_run.continued_to IS NOT NULL THEN
        -- The run continued as new: the signal is for the live end of its chain.
        SELECT * INTO v_run FROM runs WHERE id = chain_end(v_run.id) FOR UPDATE;
    END IF;
    IF v_run.status IN ('completed', 'failed', 'cancelled', 'compensated', 'compensation_failed',
                        'continued')
    THEN
        RAISE EXCEPTION 'run % is %: it takes no more signals', v_run.id, v_run.status
            USING ERRCODE = '55000';
    END IF;
    INSERT INTO signals (run_id, name, payload, key, created_at)
    VALUES (v_run.id, p_name, coalesce(p_payload, 'null'::jsonb), p_key, v_now)
    ON CONFLICT (run_id, key) DO NOTHING
    RETURNING id INTO v_id;
    IF v_id IS NULL THEN
        SELECT id INTO v_id FROM signals WHERE run_id = v_run.id AND key = p_key;
        RETURN v_id;
    END IF;
    INSERT INTO history (run_id, at, event, detail)
    VALUES (v_run.id, v_now, 'signal_received',
            jsonb_build_object('name', p_name, 'key', p_key, 'signal_id', v_id));
    IF v_run.status = 'waiting' THEN
        SELECT t.id, s.position INTO v_task, v_position
        FROM tasks t JOIN steps s ON s.run_id = t.run_id
        WHERE t.run_id = v_run.id AND t.kind = 'run' AND t.status = 'ready'
          AND t.wait_signal = p_name
          AND s.status = 'waiting' AND s.kind = 'signal' AND s.name = 'signal:' || p_name
        FOR UPDATE OF t SKIP LOCKED;
    END IF;
    IF v_task IS NOT NULL THEN
        UPDATE signals SET consumed_at = v_now, consumed_position = v_position
        WHERE id = (SELECT id FROM signals
                    WHERE run_id = v_run.id AND name = p_name AND consumed_at IS NULL
                    ORDER BY id LIMIT 1)
        RETURNING id, payload INTO v_taken, v_payload;
        UPDATE steps SET status = 'completed', output = v_payload, completed_at = v_now
        WHERE run_id = v_run.id AND position = v_position AND status = 'waiting';
        INSERT INTO history (run_id, at, event, step_position, step_name, detail)
        VALUES (v_run.id, v_now, 'signal_consumed', v_position, 'signal:' || p_name,
                jsonb_build_object('signal_id', v_taken));
    END IF;
    UPDATE tasks SET available_at = v_now
    WHERE id IN (SELECT id FROM tasks
                 WHERE run_id = v_run.id AND status = 'ready'
                   AND (wait_signal = p_name
                        OR (v_run.status = 'waiting' AND kind = 'run'
                            AND coalesce(v_run.waiting_for -> 'signals', '[]') ? p_name))
                 FOR UPDATE SKIP LOCKED);
    RETURN v_id;
END
$$;


-- emit_event's internal form (migration 0023, with its batches) also completes the races that
-- have a member the event matches.
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
    -- The races (ctx.wait_first, ctx.wait_all) with a member this event
    -- matches: the first such member (in the race's order) wins, its race
    -- checkpoint is completed with the member's name and the event, and the
    -- delivery recorded. The race's checkpoint row is the one locked, in one
    -- order by every emitter: of two events that match members of one race
    -- the second finds it completed and records nothing (that event stays
    -- free for a later wait). The members' rows are removed by the worker.
    WITH matched AS (
        SELECT w.run_id, w.position, w.ord, w.member
        FROM race_event_waits w
        JOIN runs r ON r.id = w.run_id
        JOIN steps s ON s.run_id = w.run_id AND s.position = w.position
        WHERE w.name = p_name AND w.anchor = ANY (v_anchors) AND v_payload @> w.match
          AND r.status = 'waiting' AND s.status = 'waiting' AND s.kind = 'race'
        ORDER BY w.run_id, w.position, w.ord
        FOR UPDATE OF s
    ), chosen AS (
        SELECT DISTINCT ON (m.run_id, m.position) m.run_id, m.position, m.member
        FROM matched m
        WHERE NOT EXISTS (SELECT 1 FROM event_deliveries d
                          WHERE d.event_id = v_id AND d.run_id = m.run_id)
        ORDER BY m.run_id, m.position, m.ord
    ), completed AS (
        UPDATE steps s
        SET status = 'completed', completed_at = v_now,
            output = jsonb_build_object('winner', c.member, 'value', v_event)
        FROM chosen c
        WHERE s.run_id = c.run_id AND s.position = c.position AND s.status = 'waiting'
        RETURNING s.run_id, s.position, s.name
    ), delivered AS (
        INSERT INTO event_deliveries (event_id, run_id, position, delivered_at)
        SELECT v_id, c.run_id, c.position, v_now FROM completed c
        ON CONFLICT DO NOTHING
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
    SELECT v_woke + count(*) INTO v_woke FROM completed;
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
