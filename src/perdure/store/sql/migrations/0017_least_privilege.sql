-- perdure schema, version 17: the SQL surface holds against hostile callers.
--
-- 1. Every function of the schema runs with search_path pinned to
--    pg_catalog, <schema>, pg_temp: the temporary schema is searched LAST,
--    so a caller's temporary table (say a history_default with a trigger)
--    never stands in for one of the schema's tables inside a SECURITY
--    DEFINER function. The migrator pins every function again after each
--    migration (perdure.store.migrate), and revokes EXECUTE from PUBLIC.
-- 2. The public functions (start_run, run_status, cancel_run, pause_run,
--    resume_run, get_event, read_stream, send_signal) are SECURITY DEFINER:
--    a *client* role (`perdure migrate --grant-client`) calls them with no
--    table access. They take no p_now: the server's clock stamps every row.
--    send_signal(run, name, payload, key) is the public form; the form with
--    p_now, which perdure's workers call, is internal.
-- 3. Internal functions (insert_run(s), find_run, check_text, cancel_runs,
--    pause_one, resume_one, send_signal with p_now, the history partition
--    functions) are executable by the owner and worker roles only, and check
--    their own arguments: finite times near now, bounded delays and
--    timeouts, priorities in the Python API's range, and JSON that Python
--    can decode (check_json).
-- 4. The history partition functions create at most 15 partitions a call,
--    for days from 92 days back to 31 days ahead, and drop only partitions
--    that ended in the past.
--
-- A refused call writes nothing and raises SQLSTATE 22023.

-- check_json: p_value, refused (22023) when its text is longer than
-- p_max_bytes, when it nests deeper than 200 levels (perdure's serializer's
-- MAX_DEPTH) or when it holds a number of more than 4300 integer digits
-- (Python's int_max_str_digits: jsonb writes 1e5000 as 5001 digits).
CREATE FUNCTION check_json(p_what text, p_value jsonb, p_max_bytes integer) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE
AS $$
DECLARE
    v_size integer;
BEGIN
    IF p_value IS NULL THEN
        RETURN NULL;
    END IF;
    v_size := octet_length(p_value::text);
    IF v_size > p_max_bytes THEN
        RAISE EXCEPTION '% is % bytes, over the %-byte payload limit', p_what, v_size, p_max_bytes
            USING ERRCODE = '22023';
    END IF;
    -- One walk in the usual case, in which the value is fine.
    IF NOT jsonb_path_exists(p_value, 'strict $ ? (exists (@.**{201}) || exists (@.** ? '
                                      '(@.type() == "number" && (@ >= 1e4300 || @ <= -1e4300))))')
    THEN
        RETURN p_value;
    END IF;
    IF jsonb_path_exists(p_value, 'strict $.**{201}') THEN
        RAISE EXCEPTION '% is nested deeper than 200 levels', p_what USING ERRCODE = '22023';
    END IF;
    IF jsonb_path_exists(p_value, 'strict $.** ? (@.type() == "number" && (@ >= 1e4300 || @ <= -1e4300))')
    THEN
        RAISE EXCEPTION '% holds a number of more than 4300 digits', p_what
            USING ERRCODE = '22023';
    END IF;
    RETURN p_value;
END
$$;

-- check_time: p_value if it is finite and within 100 years of now (a test's
-- virtual clock may stand years away), else 22023.
CREATE FUNCTION check_time(p_what text, p_value timestamptz) RETURNS timestamptz
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    IF p_value IS NOT NULL AND (NOT isfinite(p_value)
        OR p_value NOT BETWEEN now() - interval '100 years' AND now() + interval '100 years') THEN
        RAISE EXCEPTION '% must be a finite time within 100 years of now, not %', p_what, p_value
            USING ERRCODE = '22023';
    END IF;
    RETURN p_value;
END
$$;

-- check_seconds: p_value if it is a finite number of seconds from 0 (above
-- 0 when p_positive) to 1000 years, as perdure.engine.arguments.seconds.
CREATE FUNCTION check_seconds(p_what text, p_value float8, p_positive boolean DEFAULT false)
RETURNS float8
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF p_value IS NOT NULL AND (p_value IN ('NaN', 'Infinity', '-Infinity') OR p_value < 0
        OR (p_positive AND p_value = 0) OR p_value > 1000 * 365 * 86400.0) THEN
        RAISE EXCEPTION '% must be a % number of seconds (at most 31536000000), not %', p_what,
            CASE WHEN p_positive THEN 'positive' ELSE 'non-negative' END, p_value
            USING ERRCODE = '22023';
    END IF;
    RETURN p_value;
END
$$;

-- check_priority: the Python API's range, -2147483647 to 2147483647.
CREATE FUNCTION check_priority(p_value integer) RETURNS integer
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF p_value IS NULL OR p_value = -2147483648 THEN
        RAISE EXCEPTION 'priority must be an integer from -2147483647 to 2147483647'
            USING ERRCODE = '22023';
    END IF;
    RETURN p_value;
END
$$;

-- insert_runs (migration 0015), checking its own arguments first. Inputs may
-- be as large as the largest payload limit an App accepts (128 MiB); the
-- public start_run holds them to 1 MiB.
CREATE OR REPLACE FUNCTION insert_runs(
    p_ids uuid[], p_workflow text, p_version integer, p_queue text, p_keys text[],
    p_inputs jsonb[], p_now timestamptz, p_priority integer DEFAULT 0,
    p_delay_seconds float8 DEFAULT 0, p_parent_run_id uuid DEFAULT NULL,
    p_timeout_seconds float8 DEFAULT NULL, p_partition_key text DEFAULT NULL,
    p_dedup_key text DEFAULT NULL, p_tags jsonb DEFAULT NULL,
    p_trace_context jsonb DEFAULT NULL, p_newest boolean DEFAULT false,
    p_lookup boolean DEFAULT false
) RETURNS TABLE (n bigint, id uuid, workflow text, status text, created_at timestamptz,
                 created boolean)
LANGUAGE plpgsql
AS $$
#variable_conflict use_column
DECLARE
    v_version integer := p_version;
    v_queue   text := p_queue;
    v_found   integer;
    v_in      text;
    v_created uuid[];
    v_input   jsonb;
    v_key     text;
BEGIN
    -- One expression for the usual case, in which every argument is fine;
    -- the checks that name what is wrong run only when it is not.
    IF p_workflow IS NULL OR p_workflow !~ '^[A-Za-z_][A-Za-z0-9_.:\-]{0,127}$'
       OR p_version IS NULL OR p_version < 0 OR p_now IS NULL OR NOT isfinite(p_now)
       OR p_now NOT BETWEEN now() - interval '100 years' AND now() + interval '100 years'
       OR p_priority IS NULL OR p_priority = -2147483648
       OR p_delay_seconds IS NULL OR NOT p_delay_seconds BETWEEN 0 AND 31536000000
       OR p_timeout_seconds <= 0 OR p_timeout_seconds > 31536000000
       OR p_partition_key = '' OR length(p_partition_key) > 512
       OR p_dedup_key = '' OR length(p_dedup_key) > 512
       OR cardinality(p_ids) IS DISTINCT FROM cardinality(p_inputs)
       OR cardinality(p_ids) IS DISTINCT FROM cardinality(p_keys)
    THEN
        IF p_workflow IS NULL OR p_workflow !~ '^[A-Za-z_][A-Za-z0-9_.:\-]{0,127}$' THEN
            RAISE EXCEPTION 'invalid workflow name %', coalesce(p_workflow, 'NULL')
                USING ERRCODE = '22023';
        END IF;
        IF p_version IS NULL OR p_version < 0 THEN
            RAISE EXCEPTION 'version must be 0 or more, not %', p_version USING ERRCODE = '22023';
        END IF;
        IF p_now IS NULL THEN
            RAISE EXCEPTION 'a start needs a time' USING ERRCODE = '22023';
        END IF;
        PERFORM check_time('now', p_now);
        PERFORM check_priority(p_priority);
        PERFORM check_seconds('delay', coalesce(p_delay_seconds, 'NaN'));
        PERFORM check_seconds('timeout', p_timeout_seconds, true);
        PERFORM check_text('partition_key', p_partition_key, 512);
        PERFORM check_text('dedup_key', p_dedup_key, 512);
        RAISE EXCEPTION 'ids, keys and inputs must have as many items' USING ERRCODE = '22023';
    END IF;
    IF p_tags IS NOT NULL THEN
        PERFORM check_json('tags', p_tags, 1048576);
    END IF;
    IF p_trace_context IS NOT NULL THEN
        PERFORM check_json('trace context', p_trace_context, 65536);
    END IF;
    FOREACH v_key IN ARRAY p_keys LOOP
        IF v_key = '' OR length(v_key) > 512 THEN
            PERFORM check_text('key', v_key, 512);
        END IF;
    END LOOP;
    FOREACH v_input IN ARRAY p_inputs LOOP
        PERFORM check_json('input', v_input, 134217728);
    END LOOP;
    SELECT w.version, w.queue INTO v_found, v_in FROM workflows w
    WHERE w.name = p_workflow
      AND CASE WHEN p_newest THEN w.version > p_version
               ELSE p_lookup AND w.version = p_version END
    ORDER BY w.version DESC LIMIT 1;
    IF v_found IS NOT NULL THEN
        v_version := v_found;
        v_queue := v_in;
    ELSIF p_lookup THEN
        RETURN QUERY SELECT u.n, NULL::uuid, p_workflow, NULL::text, NULL::timestamptz, false
                     FROM unnest(p_ids) WITH ORDINALITY AS u(id, n);
        RETURN;
    END IF;
    WITH items AS (
        SELECT * FROM unnest(p_ids, p_keys, p_inputs) WITH ORDINALITY AS u(id, key, input, n)
    ), inserted AS (
        INSERT INTO runs (id, workflow, version, queue, key, status, input, parent_run_id,
                          created_at, updated_at, deadline_at, priority, partition_key, dedup_key,
                          tags, trace_context)
        SELECT i.id, p_workflow, v_version, v_queue, i.key, 'queued', i.input, p_parent_run_id,
               p_now, p_now, p_now + make_interval(secs => p_timeout_seconds), p_priority,
               p_partition_key, p_dedup_key, p_tags, p_trace_context
        FROM items i ORDER BY i.n
        ON CONFLICT DO NOTHING
        RETURNING runs.id, runs.key
    ), tasks_made AS (
        INSERT INTO tasks (run_id, kind, queue, workflow, version, priority, partition_key,
                           status, available_at, created_at)
        SELECT r.id, 'run', v_queue, p_workflow, v_version, p_priority, p_partition_key,
               'ready', p_now + make_interval(secs => p_delay_seconds), p_now
        FROM inserted r
    ), history_made AS (
        INSERT INTO history (run_id, at, event, detail)
        SELECT r.id, p_now, 'run_created',
               jsonb_build_object('workflow', p_workflow, 'version', v_version,
                                  'queue', v_queue, 'key', r.key)
        FROM inserted r
    )
    SELECT coalesce(array_agg(r.id), '{}') INTO v_created FROM inserted r;
    IF cardinality(v_created) = cardinality(p_ids) THEN
        RETURN QUERY SELECT u.n, u.id, p_workflow, 'queued'::text, p_now, true
                     FROM unnest(p_ids) WITH ORDINALITY AS u(id, n);
        RETURN;
    END IF;
    RETURN QUERY
        SELECT u.n, found.*
        FROM unnest(p_ids, p_keys) WITH ORDINALITY AS u(id, key, n)
        LEFT JOIN unnest(v_created) AS c(id) ON c.id = u.id
        CROSS JOIN LATERAL (
            (SELECT u.id, p_workflow, 'queued'::text, p_now, true WHERE c.id IS NOT NULL)
            UNION ALL
            (SELECT r.id, r.workflow, r.status, r.created_at, false FROM runs r
             WHERE c.id IS NULL AND r.key = u.key)
            UNION ALL
            (SELECT r.id, r.workflow, r.status, r.created_at, false FROM runs r
             WHERE c.id IS NULL AND r.queue = v_queue AND r.dedup_key = p_dedup_key
               AND r.status = 'queued' AND r.started_at IS NULL)
            LIMIT 1
        ) AS found
        ORDER BY u.n;
END
$$;

-- The internal forms that stamp p_now check it first.
CREATE OR REPLACE FUNCTION cancel_runs(
    p_ids uuid[], p_reason text, p_statuses text[], p_now timestamptz
) RETURNS TABLE (id uuid, previous_status text, changed boolean)
LANGUAGE sql
AS $$
WITH target AS (
    SELECT id, status FROM runs
    WHERE id IN (SELECT unnest(p_ids)) AND check_time('now', p_now) IS NOT NULL
    ORDER BY id FOR UPDATE
), cancelled AS (
    UPDATE runs r
    SET status = 'cancelled', completed_at = p_now, updated_at = p_now, waiting_for = NULL,
        cancel_reason = p_reason,
        error = jsonb_build_object('type', 'Cancelled', 'message', p_reason)
    FROM target
    WHERE r.id = target.id
      AND target.status NOT IN ('completed', 'failed', 'cancelled', 'compensated',
                                'compensation_failed')
      AND (p_statuses IS NULL OR target.status = ANY(p_statuses))
    RETURNING r.id, r.completed_at - r.started_at AS took
), dropped AS (
    DELETE FROM tasks
    WHERE id IN (SELECT t.id FROM tasks t JOIN cancelled c ON t.run_id = c.id
                 WHERE t.status <> 'claimed' FOR UPDATE OF t SKIP LOCKED)
    RETURNING id
), event AS (
    INSERT INTO history (run_id, at, event, detail, duration)
    SELECT id, p_now, 'run_cancelled', jsonb_build_object('reason', p_reason), took
    FROM cancelled
)
SELECT target.id, target.status, EXISTS (SELECT 1 FROM cancelled c WHERE c.id = target.id)
FROM target;
$$;

CREATE OR REPLACE FUNCTION pause_one(p_id uuid, p_now timestamptz)
RETURNS TABLE (previous_status text, changed bigint)
LANGUAGE sql
AS $$
WITH target AS (
    SELECT id, status FROM runs WHERE id = p_id AND check_time('now', p_now) IS NOT NULL
    FOR UPDATE
), paused AS (
    UPDATE runs r SET status = 'paused', updated_at = p_now
    FROM target
    WHERE r.id = target.id AND target.status IN ('queued', 'running', 'waiting')
    RETURNING r.id
), parked AS (
    UPDATE tasks SET status = 'paused'
    WHERE id IN (SELECT t.id FROM tasks t JOIN paused p ON t.run_id = p.id
                 WHERE t.status = 'ready' FOR UPDATE OF t SKIP LOCKED)
), event AS (
    INSERT INTO history (run_id, at, event) SELECT id, p_now, 'run_paused' FROM paused
)
SELECT target.status, (SELECT count(*) FROM paused) FROM target;
$$;

CREATE OR REPLACE FUNCTION resume_one(p_id uuid, p_now timestamptz)
RETURNS TABLE (previous_status text, changed bigint)
LANGUAGE sql
AS $$
WITH target AS (
    SELECT id, status, waiting_for FROM runs
    WHERE id = p_id AND check_time('now', p_now) IS NOT NULL FOR UPDATE
), resumed AS (
    UPDATE runs r
    SET status = CASE WHEN target.status = 'paused' THEN 'queued' ELSE r.status END,
        updated_at = p_now
    FROM target
    WHERE r.id = target.id
      AND (target.status = 'paused'
           OR (target.status = 'waiting' AND target.waiting_for ? 'sleep'))
    RETURNING r.id
), woken AS (
    UPDATE tasks SET status = 'ready', available_at = p_now
    WHERE id IN (SELECT t.id FROM tasks t JOIN resumed r ON t.run_id = r.id
                 WHERE t.status IN ('paused', 'ready') FOR UPDATE OF t SKIP LOCKED)
), slept AS (
    UPDATE steps s SET status = 'completed', completed_at = p_now
    FROM resumed
    WHERE s.run_id = resumed.id AND s.status = 'waiting' AND s.kind = 'sleep'
), event AS (
    INSERT INTO history (run_id, at, event) SELECT id, p_now, 'run_resumed' FROM resumed
)
SELECT target.status, (SELECT count(*) FROM resumed) FROM target;
$$;

-- send_signal with p_now (migration 0010) becomes internal: the previous
-- release's workers call it with all five arguments, so it keeps its name,
-- but p_now loses its default (a four-argument call means the public form).
DROP FUNCTION send_signal(text, text, jsonb, text, timestamptz);

CREATE FUNCTION send_signal(
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
    IF v_run.status IN ('completed', 'failed', 'cancelled', 'compensated', 'compensation_failed')
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
                 WHERE run_id = v_run.id AND status = 'ready' AND wait_signal = p_name
                 FOR UPDATE SKIP LOCKED);
    RETURN v_id;
END
$$;

-- send_signal: the public form. The payload is held to 1 MiB, as through
-- Python; the server's clock stamps the signal.
CREATE FUNCTION send_signal(
    p_run text, p_name text, p_payload jsonb DEFAULT 'null', p_key text DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql
SECURITY DEFINER
AS $$
BEGIN
    -- The internal form refuses JSON Python cannot decode.
    IF octet_length(p_payload::text) > 1048576 THEN
        PERFORM check_json('the signal''s payload', p_payload, 1048576);
    END IF;
    RETURN send_signal(p_run, p_name, p_payload, p_key, now());
END
$$;

-- The public forms without p_now.
DROP FUNCTION start_run(text, jsonb, text, integer, interval, integer, jsonb, text, text,
                        interval, timestamptz);
DROP FUNCTION cancel_run(text, text, timestamptz);
DROP FUNCTION pause_run(text, timestamptz);
DROP FUNCTION resume_run(text, timestamptz);

-- start_run: start a run of a registered workflow, as app.start does
-- (through insert_run), after checking each argument (see migration 0011).
CREATE FUNCTION start_run(
    p_workflow text, p_input jsonb DEFAULT 'null', p_key text DEFAULT NULL,
    p_version integer DEFAULT NULL, p_delay interval DEFAULT NULL, p_priority integer DEFAULT 0,
    p_tags jsonb DEFAULT NULL, p_partition_key text DEFAULT NULL, p_dedup_key text DEFAULT NULL,
    p_timeout interval DEFAULT NULL
) RETURNS uuid
LANGUAGE plpgsql
SECURITY DEFINER
AS $$
DECLARE
    v_found   record;
    v_tag     record;
    v_random  text := replace(gen_random_uuid()::text, '-', '');
BEGIN
    IF p_workflow IS NULL OR p_workflow !~ '^[A-Za-z_][A-Za-z0-9_.:\-]{0,127}$' THEN
        RAISE EXCEPTION 'invalid workflow name %: use 1-128 letters, digits, ''_'', ''.'', '
                        ''':'' or ''-'', starting with a letter or ''_''', coalesce(p_workflow, 'NULL')
            USING ERRCODE = '22023';
    END IF;
    IF p_version IS NOT NULL AND p_version < 1 THEN
        RAISE EXCEPTION 'version must be 1 or more, not %', p_version USING ERRCODE = '22023';
    END IF;
    PERFORM check_text('key', p_key, 512);
    PERFORM check_text('partition_key', p_partition_key, 512);
    PERFORM check_text('dedup_key', p_dedup_key, 512);
    IF p_priority IS NULL OR p_priority = -2147483648 THEN
        PERFORM check_priority(p_priority);
    END IF;
    IF p_delay < interval '0' OR NOT isfinite(p_delay)
       OR extract(epoch FROM p_delay) > 1000 * 365 * 86400.0 THEN
        RAISE EXCEPTION 'delay must not be negative nor over 1000 years, not %', p_delay
            USING ERRCODE = '22023';
    END IF;
    IF p_timeout <= interval '0' OR NOT isfinite(p_timeout)
       OR extract(epoch FROM p_timeout) > 1000 * 365 * 86400.0 THEN
        RAISE EXCEPTION 'timeout must be positive and at most 1000 years, not %', p_timeout
            USING ERRCODE = '22023';
    END IF;
    -- insert_runs refuses JSON Python cannot decode; the size is held here
    -- to what Python takes.
    IF octet_length(p_input::text) > 1048576 THEN
        PERFORM check_json('the input', p_input, 1048576);
    END IF;
    IF p_tags IS NOT NULL THEN
        IF jsonb_typeof(p_tags) <> 'object' OR (SELECT count(*) FROM jsonb_object_keys(p_tags)) > 64
        THEN
            RAISE EXCEPTION 'tags must be a JSON object of at most 64 string: string pairs'
                USING ERRCODE = '22023';
        END IF;
        FOR v_tag IN SELECT key, value FROM jsonb_each(p_tags) LOOP
            IF jsonb_typeof(v_tag.value) <> 'string' OR v_tag.key = '' OR length(v_tag.key) > 128
               OR length(v_tag.value #>> '{}') > 1024 THEN
                RAISE EXCEPTION 'tag % must have a 1-128 character name and a string value of '
                                'at most 1024 characters', v_tag.key USING ERRCODE = '22023';
            END IF;
        END LOOP;
    END IF;
    SELECT * INTO v_found FROM insert_run(
        -- A time-ordered id (UUID version 7 layout), as perdure.ids.new_run_id.
        (lpad(to_hex((extract(epoch FROM clock_timestamp()) * 1000)::bigint), 12, '0')
         || '7' || substr(v_random, 14, 3) || substr(v_random, 17))::uuid,
        p_workflow, coalesce(p_version, 0), NULL, p_key, coalesce(p_input, 'null'), now(),
        p_priority, extract(epoch FROM coalesce(p_delay, interval '0')), NULL,
        extract(epoch FROM p_timeout), p_partition_key, p_dedup_key, p_tags, NULL,
        p_version IS NULL, true);
    IF NOT FOUND THEN
        RAISE EXCEPTION 'a concurrent start of key % is not visible yet: retry the call', p_key
            USING ERRCODE = '40001';
    END IF;
    IF v_found.id IS NULL THEN
        RAISE EXCEPTION USING
            MESSAGE = format('workflow %s%s is not registered in the database', p_workflow,
                             CASE WHEN p_version IS NULL THEN '' ELSE ' version ' || p_version END),
            ERRCODE = '42704',
            HINT = 'a worker or App with its code registers it (app.register())';
    END IF;
    IF v_found.workflow <> p_workflow THEN
        RAISE EXCEPTION 'key % belongs to a run of workflow %, not %',
            p_key, v_found.workflow, p_workflow USING ERRCODE = '23505';
    END IF;
    RETURN v_found.id;
END
$$;

-- cancel_run: cancel an unfinished run, as app.cancel; its status after the
-- call. Cancelling a cancelled run again changes nothing.
CREATE FUNCTION cancel_run(p_run text, p_reason text DEFAULT 'cancelled by request')
RETURNS text
LANGUAGE plpgsql
SECURITY DEFINER
AS $$
DECLARE
    v_reason text := left(coalesce(p_reason, 'cancelled by request'), 1000);
    v_run    runs%ROWTYPE;
    v_row    record;
BEGIN
    IF v_reason = '' THEN
        RAISE EXCEPTION 'a cancellation needs a reason' USING ERRCODE = '22023';
    END IF;
    v_run := find_run(p_run);
    SELECT * INTO v_row FROM cancel_runs(ARRAY[v_run.id], v_reason, NULL, now());
    IF NOT v_row.changed AND v_row.previous_status <> 'cancelled' THEN
        PERFORM refuse_run_state(v_run.id, v_row.previous_status, 'cancel');
    END IF;
    RETURN 'cancelled';
END
$$;

-- pause_run: pause an unfinished run (a running one pauses at its next ctx
-- call); pausing a paused run changes nothing. Its status after the call.
CREATE FUNCTION pause_run(p_run text) RETURNS text
LANGUAGE plpgsql
SECURITY DEFINER
AS $$
DECLARE
    v_run runs%ROWTYPE := find_run(p_run);
    v_row record;
BEGIN
    SELECT * INTO v_row FROM pause_one(v_run.id, now());
    IF v_row.changed = 0 AND v_row.previous_status <> 'paused' THEN
        PERFORM refuse_run_state(v_run.id, v_row.previous_status, 'pause');
    END IF;
    RETURN 'paused';
END
$$;

-- resume_run: resume a paused run, or wake a sleeping one early (its sleep
-- counts as finished). Its status after the call.
CREATE FUNCTION resume_run(p_run text) RETURNS text
LANGUAGE plpgsql
SECURITY DEFINER
AS $$
DECLARE
    v_run runs%ROWTYPE := find_run(p_run);
    v_row record;
BEGIN
    SELECT * INTO v_row FROM resume_one(v_run.id, now());
    IF v_row.changed = 0 THEN
        PERFORM refuse_run_state(v_run.id, v_row.previous_status, 'resume');
    END IF;
    RETURN CASE WHEN v_row.previous_status = 'paused' THEN 'queued' ELSE v_row.previous_status END;
END
$$;

-- The public readers run as the owner too: a client role reads no table.
ALTER FUNCTION run_status(text) SECURITY DEFINER;
ALTER FUNCTION get_event(text, text) SECURITY DEFINER;
ALTER FUNCTION read_stream(text, text, integer, integer) SECURITY DEFINER;

-- History partitions: names qualified (the pinned search_path puts
-- pg_catalog first, so nothing unqualified can be created), a small number
-- of days near now, and only partitions that ended in the past dropped
-- (a p_before ahead of now counts as now, but for the schema's owner).
CREATE OR REPLACE FUNCTION history_partitions_ensure(p_now timestamptz, p_days integer DEFAULT 3)
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET lock_timeout = '2s'
AS $$
DECLARE
    v_schema text;
    v_day    date;
    v_from   timestamptz;
    v_to     timestamptz;
    v_name   text;
    v_made   integer := 0;
BEGIN
    IF p_days IS NULL OR p_days NOT BETWEEN 0 AND 14 THEN
        RAISE EXCEPTION 'p_days must be from 0 to 14, not %', p_days USING ERRCODE = '22023';
    END IF;
    IF p_now IS NULL OR NOT isfinite(p_now)
       OR p_now NOT BETWEEN now() - interval '92 days' AND now() + interval '31 days' THEN
        RAISE EXCEPTION 'partitions are made for days from 92 days back to 31 days ahead, '
                        'not from %', p_now USING ERRCODE = '22023';
    END IF;
    SELECT n.nspname INTO v_schema
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE c.oid = 'history'::regclass;
    -- Two maintainers at once would collide on the same partition.
    PERFORM pg_advisory_xact_lock(hashtext('perdure.history_partitions:' || v_schema));
    FOR v_day IN
        SELECT d::date
        FROM generate_series((p_now AT TIME ZONE 'UTC')::date,
                             (p_now AT TIME ZONE 'UTC')::date + p_days,
                             interval '1 day') AS d
    LOOP
        v_from := v_day::timestamp AT TIME ZONE 'UTC';
        v_to := (v_day + 1)::timestamp AT TIME ZONE 'UTC';
        CONTINUE WHEN EXISTS (SELECT 1 FROM history_partitions() p
                              WHERE NOT p.is_default
                                AND coalesce(p.from_at, '-infinity') < v_to
                                AND p.to_at > v_from);
        v_name := 'history_p' || to_char(v_day, 'YYYYMMDD');
        EXECUTE format('CREATE TABLE %I.%I (LIKE %I.history)', v_schema, v_name, v_schema);
        EXECUTE format('LOCK TABLE %I.history_default IN SHARE ROW EXCLUSIVE MODE', v_schema);
        EXECUTE format('WITH moved AS (DELETE FROM %I.history_default WHERE at >= %L AND at < %L '
                       'RETURNING *) INSERT INTO %I.%I SELECT * FROM moved',
                       v_schema, v_from, v_to, v_schema, v_name);
        EXECUTE format('ALTER TABLE %I.history ATTACH PARTITION %I.%I FOR VALUES FROM (%L) TO (%L)',
                       v_schema, v_schema, v_name, v_from, v_to);
        v_made := v_made + 1;
    END LOOP;
    RETURN v_made;
END
$$;

CREATE OR REPLACE FUNCTION history_partition_drop(p_before timestamptz)
RETURNS text
LANGUAGE plpgsql
SECURITY DEFINER
SET lock_timeout = '2s'
AS $$
DECLARE
    v_schema text;
    v_before timestamptz;
    v_part   record;
BEGIN
    IF p_before IS NULL OR NOT isfinite(p_before) THEN
        RAISE EXCEPTION 'p_before must be a finite time, not %', coalesce(p_before::text, 'NULL')
            USING ERRCODE = '22023';
    END IF;
    -- Roles other than the schema's owner drop only partitions that ended by now.
    SELECT n.nspname, CASE WHEN pg_has_role(session_user, n.nspowner, 'USAGE') THEN p_before
                           ELSE least(p_before, now()) END
    INTO v_schema, v_before
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE c.oid = 'history'::regclass;
    PERFORM pg_advisory_xact_lock(hashtext('perdure.history_partitions:' || v_schema));
    SELECT p.name, p.to_at INTO v_part
    FROM history_partitions() p
    WHERE NOT p.is_default AND p.to_at <= v_before
    ORDER BY p.to_at
    LIMIT 1;
    IF v_part.name IS NULL THEN
        RETURN NULL;
    END IF;
    EXECUTE format('ALTER TABLE %I.history DETACH PARTITION %I.%I',
                   v_schema, v_schema, v_part.name);
    EXECUTE format('INSERT INTO %I.history OVERRIDING SYSTEM VALUE SELECT * FROM %I.%I h '
                   'WHERE h.run_id IN (SELECT r.id FROM %I.runs r WHERE r.created_at < %L)',
                   v_schema, v_schema, v_part.name, v_schema, v_part.to_at);
    EXECUTE format('DROP TABLE %I.%I', v_schema, v_part.name);
    RETURN v_part.name;
END
$$;

-- Pin every function's search_path and take EXECUTE from PUBLIC (the
-- migrator does both again after each later migration).
DO $$
DECLARE
    v_fn regprocedure;
BEGIN
    FOR v_fn IN SELECT p.oid::regprocedure FROM pg_proc p
                WHERE p.pronamespace = current_schema()::regnamespace
                  AND pg_has_role(current_user, p.proowner, 'MEMBER') LOOP
        EXECUTE format('ALTER FUNCTION %s SET search_path = pg_catalog, %I, pg_temp',
                       v_fn, current_schema());
    END LOOP;
    EXECUTE format('REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA %I FROM PUBLIC', current_schema());
END
$$;
