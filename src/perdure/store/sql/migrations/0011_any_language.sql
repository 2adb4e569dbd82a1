-- perdure schema, version 11: runs from any language, in SQL.
--
-- Functions any client of PostgreSQL can call (psql, node-postgres, pgx, a
-- trigger), inside its own transaction: a run started there exists only if
-- that transaction commits. Workers learn of a new run by the tasks table's
-- NOTIFY trigger when the caller commits. A run is named by its id or by
-- its key. `perdure migrate --grant-to ROLE` grants EXECUTE on all of them.
--
--   start_run(workflow, input, key, version, delay, priority, tags,
--             partition_key, dedup_key, timeout, now)          -> uuid
--   run_status(run)  -> (id, workflow, version, key, status, output, error,
--                        created_at, started_at, completed_at)
--   cancel_run(run, reason) / pause_run(run) / resume_run(run) -> text (status)
--   get_event(run, key)                -> jsonb (NULL: not published yet)
--   read_stream(run, key, after, limit) -> (seq, value, closed)
--   send_signal(run, name, payload, key, now) (migration 0002)  -> bigint
--
-- A refused call writes nothing and raises one of these SQLSTATEs:
--   22023 invalid_parameter_value          an argument is malformed
--   42704 undefined_object                 no such workflow (or version) registered
--   23505 unique_violation                 the key belongs to a run of another workflow
--   P0002 no_data_found                    no run with that id or key
--   55000 object_not_in_prerequisite_state the run's status forbids the operation

-- The run named by id or key, locked when p_lock; P0002 when there is none.
CREATE FUNCTION find_run(p_run text, p_lock boolean DEFAULT false) RETURNS runs
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_run runs%ROWTYPE;
BEGIN
    IF p_run ~* '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' THEN
        IF p_lock THEN
            SELECT * INTO v_run FROM runs WHERE id = p_run::uuid FOR UPDATE;
        ELSE
            SELECT * INTO v_run FROM runs WHERE id = p_run::uuid;
        END IF;
    END IF;
    IF v_run.id IS NULL THEN
        IF p_lock THEN
            SELECT * INTO v_run FROM runs WHERE key = p_run FOR UPDATE;
        ELSE
            SELECT * INTO v_run FROM runs WHERE key = p_run;
        END IF;
    END IF;
    IF v_run.id IS NULL THEN
        RAISE EXCEPTION 'no run with id or key %', coalesce(p_run, 'NULL') USING ERRCODE = 'P0002';
    END IF;
    RETURN v_run;
END
$$;

-- Text argument checks shared by the functions below (22023 when refused).
CREATE FUNCTION check_text(p_what text, p_value text, p_max integer) RETURNS text
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF p_value IS NOT NULL AND (p_value = '' OR length(p_value) > p_max) THEN
        RAISE EXCEPTION '% must be 1 to % characters long', p_what, p_max
            USING ERRCODE = '22023';
    END IF;
    RETURN p_value;
END
$$;

-- insert_run: the one definition of a start, for app.start (the run_insert
-- named query calls it), child runs, schedules and start_run. It writes the
-- run, its first task and its history entry, or finds the run that already
-- has p_key (or p_dedup_key in its queue, waiting to start): created is then
-- false. With p_newest, a version registered in the database newer than
-- p_version replaces it, with its queue. With p_lookup (a caller without
-- the workflow's code), the version and queue must be registered: if they
-- are not, nothing is written and the row's id is NULL. No row: a concurrent
-- start of the same key is not visible to the caller's snapshot (a
-- repeatable-read transaction); the caller tries again.
CREATE FUNCTION insert_run(
    p_id uuid, p_workflow text, p_version integer, p_queue text, p_key text, p_input jsonb,
    p_now timestamptz, p_priority integer DEFAULT 0, p_delay_seconds float8 DEFAULT 0,
    p_parent_run_id uuid DEFAULT NULL, p_timeout_seconds float8 DEFAULT NULL,
    p_partition_key text DEFAULT NULL, p_dedup_key text DEFAULT NULL, p_tags jsonb DEFAULT NULL,
    p_trace_context jsonb DEFAULT NULL, p_newest boolean DEFAULT false,
    p_lookup boolean DEFAULT false
) RETURNS TABLE (id uuid, workflow text, status text, created_at timestamptz, created boolean)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
#variable_conflict use_column
DECLARE
    v_version integer := p_version;
    v_queue   text := p_queue;
    v_found   integer;
    v_in      text;
BEGIN
    SELECT w.version, w.queue INTO v_found, v_in FROM workflows w
    WHERE w.name = p_workflow
      AND CASE WHEN p_newest THEN w.version > p_version
               ELSE p_lookup AND w.version = p_version END
    ORDER BY w.version DESC LIMIT 1;
    IF v_found IS NOT NULL THEN
        v_version := v_found;
        v_queue := v_in;
    ELSIF p_lookup THEN
        RETURN QUERY SELECT NULL::uuid, p_workflow, NULL::text, NULL::timestamptz, false;
        RETURN;
    END IF;
    INSERT INTO runs (id, workflow, version, queue, key, status, input, parent_run_id,
                      created_at, updated_at, deadline_at, priority, partition_key, dedup_key,
                      tags, trace_context)
    VALUES (p_id, p_workflow, v_version, v_queue, p_key, 'queued', p_input, p_parent_run_id,
            p_now, p_now, p_now + make_interval(secs => p_timeout_seconds), p_priority,
            p_partition_key, p_dedup_key, p_tags, p_trace_context)
    ON CONFLICT DO NOTHING;
    IF FOUND THEN
        INSERT INTO tasks (run_id, kind, queue, workflow, version, priority, partition_key,
                           status, available_at, created_at)
        VALUES (p_id, 'run', v_queue, p_workflow, v_version, p_priority, p_partition_key,
                'ready', p_now + make_interval(secs => p_delay_seconds), p_now);
        INSERT INTO history (run_id, at, event, detail)
        VALUES (p_id, p_now, 'run_created',
                jsonb_build_object('workflow', p_workflow, 'version', v_version,
                                   'queue', v_queue, 'key', p_key));
        RETURN QUERY SELECT p_id, p_workflow, 'queued'::text, p_now, true;
        RETURN;
    END IF;
    -- A statement of its own: it sees the run whose insert this one waited for.
    RETURN QUERY
        (SELECT r.id, r.workflow, r.status, r.created_at, false FROM runs r WHERE r.key = p_key)
        UNION ALL
        (SELECT r.id, r.workflow, r.status, r.created_at, false FROM runs r
         WHERE r.queue = v_queue AND r.dedup_key = p_dedup_key AND r.status = 'queued'
           AND r.started_at IS NULL)
        LIMIT 1;
END
$$;

-- start_run: start a run of a registered workflow, as app.start does
-- (through insert_run), after checking each argument.
--
--     SELECT perdure.start_run('send_invoice', '{"order": 9182}', p_key => 'invoice:9182');
--
-- Without p_version the run is pinned to the newest registered version, and
-- goes to that version's queue. With p_key, starting again returns the run
-- that has the key (idempotent); with p_dedup_key, a start while a run of the
-- queue with that key waits to start returns that run. p_delay makes the run
-- due later, p_timeout cancels it if it has not finished that long after the
-- start; higher p_priority is claimed first; p_tags is a JSON object of
-- strings; p_partition_key counts the run against its queue's partition limits.
CREATE FUNCTION start_run(
    p_workflow text, p_input jsonb DEFAULT 'null', p_key text DEFAULT NULL,
    p_version integer DEFAULT NULL, p_delay interval DEFAULT NULL, p_priority integer DEFAULT 0,
    p_tags jsonb DEFAULT NULL, p_partition_key text DEFAULT NULL, p_dedup_key text DEFAULT NULL,
    p_timeout interval DEFAULT NULL, p_now timestamptz DEFAULT NULL
) RETURNS uuid
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_now     timestamptz := coalesce(p_now, now());
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
        RAISE EXCEPTION 'priority must be an integer from -2147483647 to 2147483647'
            USING ERRCODE = '22023';
    END IF;
    IF p_delay < interval '0' THEN
        RAISE EXCEPTION 'delay must not be negative, not %', p_delay USING ERRCODE = '22023';
    END IF;
    IF p_timeout <= interval '0' THEN
        RAISE EXCEPTION 'timeout must be positive, not %', p_timeout USING ERRCODE = '22023';
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
        p_workflow, coalesce(p_version, 0), NULL, p_key, coalesce(p_input, 'null'), v_now,
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

-- run_status: a run's status, output and error (live runs; archived ones are
-- read with perdure's Python API or CLI).
CREATE FUNCTION run_status(p_run text) RETURNS TABLE (
    id uuid, workflow text, version integer, key text, status text, output jsonb, error jsonb,
    created_at timestamptz, started_at timestamptz, completed_at timestamptz
)
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_run runs%ROWTYPE := find_run(p_run);
BEGIN
    RETURN QUERY SELECT v_run.id, v_run.workflow, v_run.version, v_run.key, v_run.status,
                        v_run.output, v_run.error, v_run.created_at, v_run.started_at,
                        v_run.completed_at;
END
$$;

-- The refusal of an operation on a run in the wrong status (55000).
CREATE FUNCTION refuse_run_state(p_id uuid, p_status text, p_operation text) RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
    RAISE EXCEPTION 'cannot % run %: it is %', p_operation, p_id, p_status
        USING ERRCODE = '55000';
END
$$;

-- cancel_runs: cancel the unfinished runs among p_ids: the one definition of
-- a cancellation, for app.cancel and bulk cancels (the run_cancel named
-- query calls it) and cancel_run. Their waiting or queued tasks are
-- deleted; a task a worker holds is left to that worker, which sees the
-- cancellation at its next ctx call (a step in flight finishes, its
-- successor never starts). SKIP LOCKED: a task being claimed this instant
-- is let go by its claimer once this commits. p_statuses, when not NULL,
-- narrows the statuses cancelled (a bulk cancel's filter, checked again
-- under the row lock). Rows are locked in id order, so two batches never
-- deadlock. Returns each run's status before the call, so cancelling twice
-- is recognised as a no-op.
CREATE FUNCTION cancel_runs(
    p_ids uuid[], p_reason text, p_statuses text[], p_now timestamptz
) RETURNS TABLE (id uuid, previous_status text, changed boolean)
LANGUAGE sql
SET search_path FROM CURRENT
AS $$
WITH target AS (
    SELECT id, status FROM runs WHERE id IN (SELECT unnest(p_ids)) ORDER BY id FOR UPDATE
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

-- pause_one: pause an unfinished run, the one definition for app.pause (the
-- run_pause named query) and pause_run: its task is not claimed until it
-- is resumed; a run being executed now pauses at its next ctx call. Returns
-- the run's status before the call and whether it changed.
CREATE FUNCTION pause_one(p_id uuid, p_now timestamptz)
RETURNS TABLE (previous_status text, changed bigint)
LANGUAGE sql
SET search_path FROM CURRENT
AS $$
WITH target AS (
    SELECT id, status FROM runs WHERE id = p_id FOR UPDATE
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

-- resume_one: resume a paused run, or wake a sleeping one early (its task is
-- due now, and a durable sleep in progress counts as finished): the one
-- definition for app.resume (the run_resume named query) and resume_run.
CREATE FUNCTION resume_one(p_id uuid, p_now timestamptz)
RETURNS TABLE (previous_status text, changed bigint)
LANGUAGE sql
SET search_path FROM CURRENT
AS $$
WITH target AS (
    SELECT id, status, waiting_for FROM runs WHERE id = p_id FOR UPDATE
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

-- cancel_run: cancel an unfinished run, as app.cancel; its status after the
-- call. Cancelling a cancelled run again changes nothing.
CREATE FUNCTION cancel_run(
    p_run text, p_reason text DEFAULT 'cancelled by request', p_now timestamptz DEFAULT NULL
) RETURNS text
LANGUAGE plpgsql
SET search_path FROM CURRENT
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
    SELECT * INTO v_row FROM cancel_runs(ARRAY[v_run.id], v_reason, NULL, coalesce(p_now, now()));
    IF NOT v_row.changed AND v_row.previous_status <> 'cancelled' THEN
        PERFORM refuse_run_state(v_run.id, v_row.previous_status, 'cancel');
    END IF;
    RETURN 'cancelled';
END
$$;

-- pause_run: pause an unfinished run (a running one pauses at its next ctx
-- call); pausing a paused run changes nothing. Its status after the call.
CREATE FUNCTION pause_run(p_run text, p_now timestamptz DEFAULT NULL) RETURNS text
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_run runs%ROWTYPE := find_run(p_run);
    v_row record;
BEGIN
    SELECT * INTO v_row FROM pause_one(v_run.id, coalesce(p_now, now()));
    IF v_row.changed = 0 AND v_row.previous_status <> 'paused' THEN
        PERFORM refuse_run_state(v_run.id, v_row.previous_status, 'pause');
    END IF;
    RETURN 'paused';
END
$$;

-- resume_run: resume a paused run, or wake a sleeping one early (its sleep
-- counts as finished). Its status after the call.
CREATE FUNCTION resume_run(p_run text, p_now timestamptz DEFAULT NULL) RETURNS text
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_run runs%ROWTYPE := find_run(p_run);
    v_row record;
BEGIN
    SELECT * INTO v_row FROM resume_one(v_run.id, coalesce(p_now, now()));
    IF v_row.changed = 0 THEN
        PERFORM refuse_run_state(v_run.id, v_row.previous_status, 'resume');
    END IF;
    RETURN CASE WHEN v_row.previous_status = 'paused' THEN 'queued' ELSE v_row.previous_status END;
END
$$;

-- get_event: the latest value a run published under an event key
-- (ctx.set_event); NULL while it has published none.
CREATE FUNCTION get_event(p_run text, p_key text) RETURNS jsonb
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_run runs%ROWTYPE := find_run(p_run);
BEGIN
    PERFORM check_text('event key', coalesce(p_key, ''), 200);
    RETURN (SELECT value FROM events WHERE run_id = v_run.id AND key = p_key);
END
$$;

-- read_stream: the entries of a run's stream (ctx.write_stream) after
-- position p_after, in order, at most p_limit. The entry whose closed is
-- true ends the stream; pass the last seq read as p_after to read on.
CREATE FUNCTION read_stream(
    p_run text, p_key text, p_after integer DEFAULT 0, p_limit integer DEFAULT 1000
) RETURNS TABLE (seq integer, value jsonb, closed boolean)
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT
AS $$
DECLARE
    v_run runs%ROWTYPE := find_run(p_run);
BEGIN
    PERFORM check_text('stream key', coalesce(p_key, ''), 200);
    IF p_after IS NULL OR p_after < 0 OR p_limit IS NULL OR p_limit NOT BETWEEN 1 AND 10000 THEN
        RAISE EXCEPTION 'read_stream needs p_after >= 0 and p_limit from 1 to 10000'
            USING ERRCODE = '22023';
    END IF;
    RETURN QUERY SELECT s.seq, s.value, s.closed FROM streams s
                 WHERE s.run_id = v_run.id AND s.key = p_key AND s.seq > p_after
                 ORDER BY s.seq LIMIT p_limit;
END
$$;
