-- perdure schema, version 20: emitted events, the waits on them and the
-- workflows they start.
--
-- An *emitted event* (`app.emit`, `emit_event` in SQL) is a named fact with a
-- JSON payload, recorded once per (name, key). It is not the `events` table,
-- which holds the values a run publishes with `ctx.set_event`.
--
-- Emitting, in the emitter's transaction (so an emit inside a transaction
-- that rolls back leaves nothing: the transactional outbox):
--   1. records the event (a second emit with the same name and key records
--      nothing and wakes nothing);
--   2. completes every parked `ctx.wait_for_event` on that name whose match
--      the payload contains (`payload @> match`), makes its run due, and
--      records the delivery: a run takes a given event at most once;
--   3. starts one run of every workflow whose trigger matches, with the
--      run key `event:<event id>:<workflow>`: one run per event, exactly once.
--
-- Finding the waits and triggers is an index lookup, not a scan of every
-- wait on the name: each wait and trigger stores one *anchor* of its match
-- (a hash of one scalar leaf reached through objects: path and value), and
-- an emit looks up (name, anchor) for each scalar leaf of its payload, plus
-- the empty anchor of matches that have no scalar leaf. Containment implies
-- that every such leaf of the match is a leaf of the payload, so no match is
-- missed; the containment test then runs on those candidates only.
--
-- Emitters of one name share an advisory lock on it, and a wait that parks
-- on that name takes it alone (event_lock_key): either the event is committed
-- before the wait looks for it, or the wait is parked before the emitter
-- looks for waits.

CREATE TABLE emitted_events (
    id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name       text        NOT NULL,
    -- The emitter's idempotency key: a second emit with the same name and key
    -- records nothing.
    key        text,
    payload    jsonb       NOT NULL,
    emitted_at timestamptz NOT NULL,
    UNIQUE (name, key)
);
-- A wait's lookback (name, time) and the containment test (GIN), the listing
-- and retention (time).
CREATE INDEX emitted_events_name_at_idx ON emitted_events (name, emitted_at);
CREATE INDEX emitted_events_payload_idx ON emitted_events USING gin (payload jsonb_path_ops);
CREATE INDEX emitted_events_at_idx ON emitted_events (emitted_at);

-- A run parked at ctx.wait_for_event: the row lives while the wait does.
CREATE TABLE event_waits (
    run_id   uuid        NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    position integer     NOT NULL,
    name     text        NOT NULL,
    match    jsonb       NOT NULL,
    -- One scalar leaf of match, hashed ('' when it has none): see above.
    anchor   text        NOT NULL,
    -- Events emitted from this time on count (the wait's start minus its lookback).
    since    timestamptz NOT NULL,
    PRIMARY KEY (run_id, position)
);
CREATE INDEX event_waits_anchor_idx ON event_waits (name, anchor);

-- Which run took which event: by a wait at `position`, or (position NULL)
-- started by it through a trigger.
CREATE TABLE event_deliveries (
    event_id     bigint      NOT NULL REFERENCES emitted_events (id) ON DELETE CASCADE,
    run_id       uuid        NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    position     integer,
    delivered_at timestamptz NOT NULL,
    PRIMARY KEY (event_id, run_id)
);
CREATE INDEX event_deliveries_run_idx ON event_deliveries (run_id);

-- The events that start a workflow (`@app.workflow(on_event=...)`), as its
-- workers registered them.
CREATE TABLE event_triggers (
    workflow   text        NOT NULL,
    name       text        NOT NULL,
    match      jsonb       NOT NULL,
    anchor     text        NOT NULL,
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (workflow, name, match)
);
CREATE INDEX event_triggers_anchor_idx ON event_triggers (name, anchor);

-- A wait for an emitted event is a step of its own kind ('event' is a value
-- published by ctx.set_event). NOT VALID: existing rows are not rescanned
-- (they all hold older kinds), new rows are checked.
ALTER TABLE steps DROP CONSTRAINT steps_kind_check;
ALTER TABLE steps ADD CONSTRAINT steps_kind_check CHECK (kind IN
    ('step', 'transaction', 'sleep', 'signal', 'event', 'stream', 'gather', 'child',
     'child_result', 'compensation', 'event_wait')) NOT VALID;

-- event_anchors: the sorted hashes of the scalar leaves of p_value reached
-- through objects only (at most 32 levels deep), each of its path and its
-- value (numbers without trailing zeros: jsonb compares 1.0 and 1 equal).
CREATE FUNCTION event_anchors(p_value jsonb) RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
WITH RECURSIVE leaf(path, value) AS (
    SELECT ARRAY[]::text[], p_value WHERE jsonb_typeof(p_value) = 'object'
    UNION ALL
    SELECT l.path || e.key, e.value
    FROM leaf l, jsonb_each(l.value) e
    WHERE jsonb_typeof(l.value) = 'object' AND cardinality(l.path) < 32
)
SELECT coalesce(array_agg(DISTINCT md5(
           to_jsonb(path)::text || ' ' ||
           CASE jsonb_typeof(value) WHEN 'number' THEN trim_scale((value #>> '{}')::numeric)::text
                ELSE value::text END)), '{}')
FROM leaf WHERE jsonb_typeof(value) NOT IN ('object', 'array');
$$;

-- event_anchor: the anchor a wait or trigger on p_match is filed under.
CREATE FUNCTION event_anchor(p_match jsonb) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT coalesce((event_anchors(p_match))[1], '') $$;

-- event_lock_key: the advisory lock of event name p_name in this schema.
CREATE FUNCTION event_lock_key(p_name text) RETURNS bigint
LANGUAGE sql STABLE
AS $$
SELECT ((('emitted_events'::regclass)::oid::bigint) << 32) | (hashtext(p_name)::bigint & 4294967295)
$$;

-- emit_event, the internal form (perdure's App calls it with its clock and
-- payload limit): record the event, wake the waits it matches, start the
-- runs its triggers name. Returns the event's id, whether it was recorded now
-- (false: the key was emitted before), and how many runs it woke and started.
CREATE FUNCTION emit_event(
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
    FOR v_trigger IN
        SELECT DISTINCT g.workflow FROM event_triggers g
        WHERE g.name = p_name AND g.anchor = ANY (v_anchors) AND v_payload @> g.match
        ORDER BY g.workflow
    LOOP
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

-- emit_event: the public form, for any language and for triggers on the
-- user's own tables. The payload is held to 1 MiB, as through Python; the
-- server's clock stamps the event. Returns the event's id.
CREATE FUNCTION emit_event(p_name text, p_payload jsonb DEFAULT '{}', p_key text DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql
SECURITY DEFINER
AS $$
BEGIN
    RETURN (SELECT e.id FROM emit_event(p_name, p_payload, p_key, NULL, 1048576) e);
END
$$;
