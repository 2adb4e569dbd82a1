-- perdure schema, version 30: the waits of many events matched in one
-- statement.
--
-- emit_events (migration 0029) recorded its events one at a time, each
-- through event_record: a lookup of its waits, a lookup of its races, a
-- history entry and a due time per event, every statement planned again
-- for each. With 10,000 runs waiting, a call of 100 events spent most of its
-- time there. event_record_many records the events of one call in order,
-- then takes every wait they match in one statement (each wait by the first
-- event of the call that matches it, as one event after the other would),
-- then the races and the triggers event by event, only when the call's names
-- have any, then the history entries and due times of all the woken runs at
-- once. emit_event and emit_events both call it (emit_event with one event),
-- and answer as before.
--
-- Why the order is the same as one event after the other: a wait is taken by
-- the first event of the call that matches it; a race completes and records
-- a delivery of its own event only, so it changes nothing a later event's
-- waits look at, and a later event's waits record deliveries of that later
-- event only, which an earlier event's race does not look at; a triggered
-- run starts with no wait. The name locks are all taken first (shared, in
-- one order), as a wait parking takes one name's lock alone.

-- event_record_many: record the events p_names, p_loads (checked payloads,
-- event_checked), p_keys, in order, stamped p_now (NULL: the clock, per
-- event), each once per key; then wake their waits, complete their races and
-- start their triggers' runs. One row per event: its index from 0, its id,
-- whether it was recorded now (false: the key was emitted before, or earlier
-- in the call: nothing woken or started), and how many runs it woke and
-- started.
CREATE FUNCTION event_record_many(
    p_names text[], p_loads jsonb[], p_keys text[], p_now timestamptz, p_max_bytes integer
) RETURNS TABLE (index integer, id bigint, created boolean, woke integer, started integer)
LANGUAGE plpgsql
-- Its statements are planned once per connection (planning the one that
-- takes the waits again for each call cost more than running it). Their
-- plans do not depend on the call's size: every table row is reached through
-- an index from the row before it, and no statement joins two of its own
-- intermediate results (which a plan made for one event would loop over).
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
DECLARE
    v_count     integer := coalesce(cardinality(p_names), 0);
    v_ids       bigint[] := '{}';
    v_ats       timestamptz[] := '{}';
    v_created   boolean[] := '{}';
    v_started   integer[] := array_fill(0, ARRAY[coalesce(cardinality(p_names), 0)]);
    v_woke      integer[] := array_fill(0, ARRAY[coalesce(cardinality(p_names), 0)]);
    -- The steps the events completed, one element each: which event (its
    -- index from 1, id, name, time), which run, position and step.
    v_ords      integer[];
    v_wids      bigint[];
    v_wnames    text[];
    v_wats      timestamptz[];
    v_runs      uuid[];
    v_positions integer[];
    v_steps     text[];
    v_id        bigint;
    v_at        timestamptz;
    v_anchors   text[];
    v_event     jsonb;
    v_races     boolean;
    v_triggers  boolean;
    v_ord       integer;
    i           integer;
BEGIN
    IF v_count = 0 THEN
        RETURN;
    END IF;
    PERFORM pg_advisory_xact_lock_shared(event_lock_key(n.name))
    FROM (SELECT DISTINCT u.name FROM unnest(p_names) AS u (name) ORDER BY 1) n;
    FOR i IN 1 .. v_count LOOP
        v_at := coalesce(p_now, clock_timestamp());
        INSERT INTO emitted_events (name, key, payload, emitted_at)
        VALUES (p_names[i], p_keys[i], p_loads[i], v_at)
        ON CONFLICT (name, key) DO NOTHING
        RETURNING emitted_events.id INTO v_id;
        IF v_id IS NULL THEN
            SELECT e.id INTO v_id FROM emitted_events e
            WHERE e.name = p_names[i] AND e.key = p_keys[i];
            v_created := v_created || false;
        ELSE
            v_created := v_created || true;
        END IF;
        v_ids := v_ids || v_id;
        v_ats := v_ats || v_at;
    END LOOP;
    -- Every wait the recorded events match, taken by the first of them that
    -- matches it. Each row carries what the next needs.
    WITH RECURSIVE ev AS (
        SELECT u.ord::integer AS ord, u.id, u.name, u.key, u.payload, u.at
        FROM unnest(v_ids, p_names, p_keys, p_loads, v_ats, v_created)
             WITH ORDINALITY AS u (id, name, key, payload, at, created, ord)
        WHERE u.created
    ), leaf (ord, name, payload, path, value) AS (
        -- event_anchors (migration 0020) of every event at once.
        SELECT e.ord, e.name, e.payload, ARRAY[]::text[], e.payload
        FROM ev e WHERE jsonb_typeof(e.payload) = 'object'
        UNION ALL
        SELECT l.ord, l.name, l.payload, l.path || x.key, x.value
        FROM leaf l, jsonb_each(l.value) x
        WHERE jsonb_typeof(l.value) = 'object' AND cardinality(l.path) < 32
    ), anchored AS (
        SELECT l.ord, l.name, l.payload, md5(
                   to_jsonb(l.path)::text || ' ' ||
                   CASE jsonb_typeof(l.value)
                       WHEN 'number' THEN trim_scale((l.value #>> '{}')::numeric)::text
                       ELSE l.value::text END) AS anchor
        FROM leaf l WHERE jsonb_typeof(l.value) NOT IN ('object', 'array')
        UNION ALL
        SELECT e.ord, e.name, e.payload, '' FROM ev e
    ), candidate AS (
        -- Each (name, anchor) looked up in the waits' index, whatever the
        -- call's size: a lookup per anchor, not a scan.
        SELECT DISTINCT ON (w.run_id, w.position) w.run_id, w.position, k.ord
        FROM anchored k
        CROSS JOIN LATERAL (
            SELECT w.run_id, w.position, w.match FROM event_waits w
            WHERE w.name = k.name AND w.anchor = k.anchor OFFSET 0
        ) w
        WHERE k.payload @> w.match
        ORDER BY w.run_id, w.position, k.ord
    ), matched AS (
        -- Locked one by one in (run, position) order, as every emitter does.
        SELECT c.run_id, c.position, c.ord
        FROM candidate c
        CROSS JOIN LATERAL (
            SELECT 1 FROM event_waits w JOIN runs r ON r.id = w.run_id
            WHERE w.run_id = c.run_id AND w.position = c.position AND r.status = 'waiting'
            FOR UPDATE OF w
        ) l
    ), taken AS (
        DELETE FROM event_waits w USING matched m
        WHERE w.run_id = m.run_id AND w.position = m.position
        RETURNING w.run_id, w.position, m.ord
    ), chosen AS (
        -- A run takes an event once: of two of its waits one event matches,
        -- one is completed (both are taken, as one event at a time did).
        SELECT DISTINCT ON (t.ord, t.run_id) t.ord, t.run_id, t.position,
               v_ids[t.ord] AS id, v_ats[t.ord] AS at
        FROM taken t
        ORDER BY t.ord, t.run_id, t.position
    ), delivered AS (
        INSERT INTO event_deliveries (event_id, run_id, position, delivered_at)
        SELECT c.id, c.run_id, c.position, c.at FROM chosen c
        ON CONFLICT DO NOTHING
    ), completed AS (
        UPDATE steps s
        SET status = 'completed', completed_at = c.at,
            output = jsonb_build_object('id', c.id, 'name', x.name, 'key', x.key,
                                        'payload', x.payload, 'emitted_at', c.at)
        FROM chosen c JOIN emitted_events x ON x.id = c.id
        WHERE s.run_id = c.run_id AND s.position = c.position AND s.status = 'waiting'
        RETURNING c.ord, c.id, x.name, c.at, s.run_id, s.position, s.name AS step
    )
    SELECT coalesce(array_agg(c.ord ORDER BY c.ord, c.run_id, c.position), '{}'),
           coalesce(array_agg(c.id ORDER BY c.ord, c.run_id, c.position), '{}'),
           coalesce(array_agg(c.name ORDER BY c.ord, c.run_id, c.position), '{}'),
           coalesce(array_agg(c.at ORDER BY c.ord, c.run_id, c.position), '{}'),
           coalesce(array_agg(c.run_id ORDER BY c.ord, c.run_id, c.position), '{}'),
           coalesce(array_agg(c.position ORDER BY c.ord, c.run_id, c.position), '{}'),
           coalesce(array_agg(c.step ORDER BY c.ord, c.run_id, c.position), '{}')
    INTO v_ords, v_wids, v_wnames, v_wats, v_runs, v_positions, v_steps
    FROM completed c;
    -- The races, event by event (the first event that matches a member of a
    -- race wins it), and the triggers: looked for only when the call's names
    -- have any (their waits cannot park while the names are locked).
    v_races := EXISTS (SELECT 1 FROM race_event_waits w WHERE w.name = ANY (p_names));
    v_triggers := EXISTS (SELECT 1 FROM event_triggers g WHERE g.name = ANY (p_names));
    IF v_races OR v_triggers THEN
        FOR i IN 1 .. v_count LOOP
            CONTINUE WHEN NOT v_created[i];
            v_anchors := array_append(event_anchors(p_loads[i]), '');
            v_event := jsonb_build_object('id', v_ids[i], 'name', p_names[i], 'key', p_keys[i],
                                          'payload', p_loads[i], 'emitted_at', v_ats[i]);
            IF v_races THEN
                SELECT v_ords || coalesce(array_agg(i), '{}'),
                       v_wids || coalesce(array_agg(v_ids[i]), '{}'),
                       v_wnames || coalesce(array_agg(p_names[i]), '{}'),
                       v_wats || coalesce(array_agg(v_ats[i]), '{}'),
                       v_runs || coalesce(array_agg(w.woken_run), '{}'),
                       v_positions || coalesce(array_agg(w.woken_position), '{}'),
                       v_steps || coalesce(array_agg(w.woken_step), '{}')
                INTO v_ords, v_wids, v_wnames, v_wats, v_runs, v_positions, v_steps
                FROM event_complete_races(v_ids[i], p_names[i], p_loads[i], v_anchors,
                                          v_event, v_ats[i]) w;
            END IF;
            IF v_triggers THEN
                v_started[i] := event_start_triggered(v_ids[i], p_names[i], p_loads[i],
                                                      v_anchors, v_event, v_ats[i],
                                                      p_max_bytes);
            END IF;
        END LOOP;
    END IF;
    -- What each completed step costs, in the events' order: its history
    -- entry, and its run's task made due at the (last) event's time.
    IF cardinality(v_runs) > 0 THEN
        INSERT INTO history (run_id, at, event, step_position, step_name, detail)
        SELECT w.run_id, w.at, 'event_consumed', w.position, w.step,
               jsonb_build_object('event_id', w.id, 'name', w.name)
        FROM unnest(v_ords, v_wids, v_wnames, v_wats, v_runs, v_positions, v_steps)
             WITH ORDINALITY AS w (ord, id, name, at, run_id, position, step, seq)
        ORDER BY w.ord, w.seq;
        UPDATE tasks t SET available_at = d.at
        FROM (SELECT DISTINCT ON (w.run_id) w.run_id, w.at
              FROM unnest(v_ords, v_runs, v_wats) AS w (ord, run_id, at)
              ORDER BY w.run_id, w.ord DESC) d
        WHERE t.run_id = d.run_id AND t.kind = 'run' AND t.status = 'ready';
        FOREACH v_ord IN ARRAY v_ords LOOP
            v_woke[v_ord] := v_woke[v_ord] + 1;
        END LOOP;
    END IF;
    RETURN QUERY
    SELECT u.ord::integer - 1, u.id, u.created, u.woke, u.started
    FROM unnest(v_ids, v_created, v_woke, v_started)
         WITH ORDINALITY AS u (id, created, woke, started, ord)
    ORDER BY u.ord;
END
$$;

-- event_record (migration 0029): one event, through event_record_many.
CREATE OR REPLACE FUNCTION event_record(
    p_name text, p_payload jsonb, p_key text, p_now timestamptz, p_max_bytes integer
) RETURNS TABLE (id bigint, created boolean, woke integer, started integer)
LANGUAGE plpgsql
AS $$
BEGIN
    RETURN QUERY
    SELECT r.id, r.created, r.woke, r.started
    FROM event_record_many(ARRAY[p_name], ARRAY[p_payload], ARRAY[p_key],
                           coalesce(p_now, clock_timestamp()), p_max_bytes) r;
END
$$;

-- emit_event, the internal form (migrations 0020, 0023, 0025, 0029):
-- checked, then recorded with its deliveries by event_record_many.
CREATE OR REPLACE FUNCTION emit_event(
    p_name text, p_payload jsonb, p_key text, p_now timestamptz, p_max_bytes integer
) RETURNS TABLE (id bigint, created boolean, woke integer, started integer)
LANGUAGE plpgsql
AS $$
DECLARE
    v_now     timestamptz := check_time('now', coalesce(p_now, clock_timestamp()));
    v_payload jsonb := event_checked(p_name, p_payload, p_key, p_max_bytes);
BEGIN
    RETURN QUERY
    SELECT r.id, r.created, r.woke, r.started
    FROM event_record_many(ARRAY[p_name], ARRAY[v_payload], ARRAY[p_key], v_now,
                           p_max_bytes) r;
END
$$;

-- emit_events, the internal form (migration 0029): checked as before, then
-- recorded by event_record_many in one go.
CREATE OR REPLACE FUNCTION emit_events(
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
    RETURN QUERY
    SELECT r.index, r.id, r.created, r.woke, r.started
    FROM event_record_many(v_names, v_loads, v_keys,
                           CASE WHEN p_now IS NULL THEN NULL ELSE v_now END, p_max_bytes) r;
END
$$;

-- emit_event_deferring and emit_events_deferring: as the internal forms of
-- emit_event and emit_events, in a transaction whose wake-up notifications
-- are deferred (migration 0029: `perdure.deferred_wakeups`), with the queues
-- to notify after the commit on each row (each followed by a newline). One
-- statement where the App sent three (set, emit, read the queues): app.emit
-- and app.emit_many without conn=.
CREATE FUNCTION emit_event_deferring(
    p_name text, p_payload jsonb, p_key text, p_now timestamptz, p_max_bytes integer
) RETURNS TABLE (id bigint, created boolean, woke integer, started integer, queues text)
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
    v_row record;
BEGIN
    PERFORM set_config('perdure.deferred_wakeups', E'\n', true);
    SELECT * INTO v_row FROM emit_event(p_name, p_payload, p_key, p_now, p_max_bytes);
    RETURN QUERY SELECT v_row.id, v_row.created, v_row.woke, v_row.started,
                        coalesce(current_setting('perdure.deferred_wakeups', true), '');
END
$$;

CREATE FUNCTION emit_events_deferring(
    p_events jsonb, p_now timestamptz, p_max_bytes integer, p_max_events integer
) RETURNS TABLE (index integer, id bigint, created boolean, woke integer, started integer,
                 queues text)
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
    v_index   integer[];
    v_id      bigint[];
    v_created boolean[];
    v_woke    integer[];
    v_started integer[];
BEGIN
    PERFORM set_config('perdure.deferred_wakeups', E'\n', true);
    SELECT array_agg(e.index ORDER BY e.index), array_agg(e.id ORDER BY e.index),
           array_agg(e.created ORDER BY e.index), array_agg(e.woke ORDER BY e.index),
           array_agg(e.started ORDER BY e.index)
    INTO v_index, v_id, v_created, v_woke, v_started
    FROM emit_events(p_events, p_now, p_max_bytes, p_max_events) e;
    RETURN QUERY
    SELECT u.index, u.id, u.created, u.woke, u.started,
           coalesce(current_setting('perdure.deferred_wakeups', true), '')
    FROM unnest(v_index, v_id, v_created, v_woke, v_started)
         AS u (index, id, created, woke, started)
    ORDER BY u.index;
END
$$;
