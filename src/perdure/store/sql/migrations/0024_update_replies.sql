-- perdure schema, version 24: update replies from SQL; updates carry over at
-- continue-as-new.
--
-- 1. continue_run (migration 0022) moves the update requests the old run
--    never decided ('requested') to its successor, as it moves unconsumed
--    signals: the successor serves them at its waits, and a caller waiting
--    for the reply (by the old run's id or the key) gets it from there.
-- 2. request_update (migration 0021) sends a request for a run that
--    continued as new to the last run of its chain, as send_signal does:
--    the old run's row lock orders it against continue_run, which locks
--    that row too (a request committed first is carried over, one sent
--    after finds the successor).
-- 3. Two public functions, for a client role (docs/any-language.md):
--    send_update(run, name, payload, update_id) records a request and
--    answers its id; update_reply(run, update_id, timeout_s) waits for its
--    reply, re-reading the request's row in a bounded loop, and answers
--    the reply, or raises:
--      PU001 update rejected (its validator refused it; nothing recorded)
--      PU002 update failed (the handler raised; DETAIL holds its error)
--      PU003 no reply within timeout_s (the request stays: call again)
--      55000 the run finished before it replied
--      P0002 no such run, or no update of that id
--      22023 a malformed argument
--    Both are SECURITY DEFINER, with search_path pinned (pg_catalog, the
--    schema, pg_temp last) like every function of the schema.

-- continue_run, as in migration 0022, and the requests carried over.
CREATE OR REPLACE FUNCTION continue_run(
    p_task_id bigint, p_worker_id text, p_attempt integer, p_new_id uuid, p_input jsonb,
    p_newest boolean, p_now timestamptz
) RETURNS TABLE (leased boolean, changed boolean, new_id uuid, new_version integer)
LANGUAGE plpgsql
AS $$
DECLARE
    v_run_id  uuid;
    v_run     runs%ROWTYPE;
    v_version integer;
    v_queue   text;
    v_found   integer;
    v_in      text;
BEGIN
    PERFORM check_time('now', p_now);
    PERFORM check_json('input', p_input, 134217728);
    DELETE FROM tasks
    WHERE id = p_task_id AND worker_id = p_worker_id AND attempt = p_attempt
      AND status = 'claimed'
    RETURNING run_id INTO v_run_id;
    IF v_run_id IS NULL THEN
        RETURN QUERY SELECT false, false, NULL::uuid, NULL::integer;
        RETURN;
    END IF;
    SELECT * INTO v_run FROM runs WHERE id = v_run_id FOR UPDATE;
    -- Whatever else the run had queued (a step task of a failed-fast gather).
    DELETE FROM tasks WHERE run_id = v_run_id AND status <> 'claimed';
    IF v_run.status NOT IN ('running', 'paused') THEN
        RETURN QUERY SELECT true, false, NULL::uuid, NULL::integer;
        RETURN;
    END IF;
    v_version := v_run.version;
    v_queue := v_run.queue;
    IF p_newest THEN
        SELECT w.version, w.queue INTO v_found, v_in FROM workflows w
        WHERE w.name = v_run.workflow AND w.version > v_run.version
        ORDER BY w.version DESC LIMIT 1;
        IF v_found IS NOT NULL THEN
            v_version := v_found;
            v_queue := v_in;
        END IF;
    END IF;
    UPDATE runs
    SET status = 'continued', key = NULL, continued_to = p_new_id, waiting_for = NULL,
        completed_at = p_now, updated_at = p_now
    WHERE id = v_run_id;
    INSERT INTO runs (id, workflow, version, queue, key, status, input, parent_run_id,
                      created_at, updated_at, deadline_at, priority, partition_key, tags,
                      trace_context, continued_from)
    VALUES (p_new_id, v_run.workflow, v_version, v_queue, v_run.key, 'queued', p_input,
            v_run.parent_run_id, p_now, p_now, v_run.deadline_at, v_run.priority,
            v_run.partition_key, v_run.tags, v_run.trace_context, v_run_id);
    INSERT INTO tasks (run_id, kind, queue, workflow, version, priority, partition_key,
                       status, available_at, created_at)
    VALUES (p_new_id, 'run', v_queue, v_run.workflow, v_version, v_run.priority,
            v_run.partition_key, 'ready', p_now, p_now);
    -- Signals the old run never took are the successor's.
    UPDATE signals SET run_id = p_new_id WHERE run_id = v_run_id AND consumed_at IS NULL;
    -- So are the update requests it never decided, in their order (their ids).
    UPDATE updates SET run_id = p_new_id WHERE run_id = v_run_id AND status = 'requested';
    INSERT INTO history (run_id, at, event, attempt, worker_id, detail, duration)
    VALUES (v_run_id, p_now, 'run_continued', p_attempt, p_worker_id,
            jsonb_build_object('continued_to', p_new_id, 'key', v_run.key),
            CASE WHEN isfinite(v_run.started_at) THEN p_now - v_run.started_at END);
    INSERT INTO history (run_id, at, event, detail)
    VALUES (p_new_id, p_now, 'run_created',
            jsonb_build_object('workflow', v_run.workflow, 'version', v_version,
                               'queue', v_queue, 'key', v_run.key,
                               'continued_from', v_run_id));
    RETURN QUERY SELECT true, true, p_new_id, v_version;
END
$$;


CREATE OR REPLACE FUNCTION request_update(
    p_run_id uuid, p_update_id text, p_name text, p_payload jsonb, p_now timestamptz
) RETURNS text
LANGUAGE plpgsql
AS $$
DECLARE
    v_status text;
    v_next   uuid;
    v_id     bigint;
BEGIN
    SELECT status, continued_to INTO v_status, v_next FROM runs WHERE id = p_run_id FOR UPDATE;
    IF v_next IS NOT NULL THEN
        -- The run continued as new: the request is for the live end of its chain.
        p_run_id := chain_end(p_run_id);
        SELECT status INTO v_status FROM runs WHERE id = p_run_id FOR UPDATE;
    END IF;
    IF v_status IS NULL OR v_status IN ('completed', 'failed', 'cancelled', 'compensated',
                                        'compensation_failed', 'continued') THEN
        RETURN v_status;
    END IF;
    INSERT INTO updates (run_id, update_id, name, payload, created_at)
    VALUES (p_run_id, p_update_id, p_name, coalesce(p_payload, 'null'::jsonb), p_now)
    ON CONFLICT (run_id, update_id) DO NOTHING
    RETURNING id INTO v_id;
    IF v_id IS NOT NULL AND v_status = 'waiting' THEN
        -- SKIP LOCKED: a task being claimed right now belongs to a worker
        -- that looks for requests after this commit.
        UPDATE tasks SET available_at = p_now
        WHERE id IN (SELECT id FROM tasks
                     WHERE run_id = p_run_id AND kind = 'run' AND status = 'ready'
                     FOR UPDATE SKIP LOCKED);
    END IF;
    RETURN v_status;
END
$$;

-- update_found: the update p_update_id of run p_run_id, looked for in that
-- run and in the last run of its chain (where a request moves when the run
-- continues as new), with the status of the run that holds it (of the
-- chain's last run when none does).
CREATE FUNCTION update_found(p_run_id uuid, p_update_id text) RETURNS TABLE (
    run_id uuid, name text, status text, result jsonb, error jsonb, run_status text
)
LANGUAGE sql STABLE
AS $$
WITH asked AS (
    SELECT r.id, r.status, r.continued_to FROM runs r WHERE r.id = p_run_id
), live AS (
    SELECT r.id, r.status FROM runs r, asked a
    WHERE r.id = CASE WHEN a.continued_to IS NULL THEN a.id ELSE chain_end(a.id) END
)
SELECT coalesce(u.run_id, l.id), u.name, u.status, u.result, u.error,
       CASE WHEN u.run_id = a.id THEN a.status ELSE l.status END
FROM asked a CROSS JOIN live l
LEFT JOIN updates u ON u.run_id IN (a.id, l.id) AND u.update_id = p_update_id
ORDER BY u.run_id = l.id DESC
LIMIT 1
$$;

-- send_update: the public form of request_update. Records update p_name
-- with p_payload (at most 1 MiB) for the run named by id or key, under
-- p_update_id (default: a new id; a retried call with the same id finds the
-- first request), and answers the update id. Its reply: update_reply.
CREATE FUNCTION send_update(
    p_run text, p_name text, p_payload jsonb DEFAULT 'null', p_update_id text DEFAULT NULL
) RETURNS text
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
DECLARE
    v_run    runs%ROWTYPE;
    v_id     text := coalesce(p_update_id, replace(gen_random_uuid()::text, '-', ''));
    v_status text;
    v_found  record;
BEGIN
    IF p_name IS NULL OR p_name !~ '^[A-Za-z_][A-Za-z0-9_.:\-]{0,127}$' THEN
        RAISE EXCEPTION 'invalid update name %: use 1-128 letters, digits, ''_'', ''.'', '
                        ''':'' or ''-'', starting with a letter or ''_''', coalesce(p_name, 'NULL')
            USING ERRCODE = '22023';
    END IF;
    PERFORM check_text('update id', v_id, 200);
    PERFORM check_text('run', p_run, 512);
    PERFORM check_json('the update''s payload', p_payload, 1048576);
    v_run := find_run(p_run);
    v_status := request_update(v_run.id, v_id, p_name, p_payload, now());
    SELECT * INTO v_found FROM update_found(v_run.id, v_id);
    IF v_found.status IS NULL THEN
        RAISE EXCEPTION 'run % is %: it takes no more updates', v_found.run_id, v_status
            USING ERRCODE = '55000';
    END IF;
    IF v_found.name <> p_name THEN
        RAISE EXCEPTION 'update id % of run % is update %, not %', v_id, v_found.run_id,
                        v_found.name, p_name
            USING ERRCODE = '22023';
    END IF;
    RETURN v_id;
END
$$;

-- update_reply: wait up to p_timeout_s seconds (0 to 300) for the reply to
-- update p_update_id of the run named by id or key, re-reading the request
-- every 10 to 100 ms. Call it outside an explicit transaction, or in one at
-- READ COMMITTED (each look sees what committed since): a REPEATABLE READ
-- snapshot would never see the reply. The reply is the handler's value as
-- stored (an App with an encrypting codec stores an envelope).
CREATE FUNCTION update_reply(
    p_run text, p_update_id text, p_timeout_s double precision DEFAULT 30
) RETURNS jsonb
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
DECLARE
    v_run      runs%ROWTYPE;
    v_found    record;
    v_deadline timestamptz;
    v_pause    double precision := 0.01;
BEGIN
    IF p_update_id IS NULL THEN
        RAISE EXCEPTION 'update id must not be NULL' USING ERRCODE = '22023';
    END IF;
    PERFORM check_text('update id', p_update_id, 200);
    PERFORM check_text('run', p_run, 512);
    IF p_timeout_s IS NULL OR p_timeout_s = 'NaN'::double precision OR p_timeout_s < 0
       OR p_timeout_s > 300 THEN
        RAISE EXCEPTION 'timeout_s must be a number of seconds from 0 to 300, not %',
                        coalesce(p_timeout_s::text, 'NULL')
            USING ERRCODE = '22023';
    END IF;
    v_run := find_run(p_run);
    v_deadline := clock_timestamp() + make_interval(secs => p_timeout_s);
    LOOP
        SELECT * INTO v_found FROM update_found(v_run.id, p_update_id);
        IF v_found.status = 'completed' THEN
            RETURN v_found.result;
        ELSIF v_found.status = 'rejected' THEN
            RAISE EXCEPTION 'update % (%) was rejected: %', p_update_id, v_found.name,
                            coalesce(v_found.error ->> 'message', '')
                USING ERRCODE = 'PU001', DETAIL = coalesce(v_found.error::text, '');
        ELSIF v_found.status = 'failed' THEN
            RAISE EXCEPTION 'update % (%) failed: %', p_update_id, v_found.name,
                            coalesce(v_found.error ->> 'message', '')
                USING ERRCODE = 'PU002', DETAIL = coalesce(v_found.error::text, '');
        ELSIF v_found.status IS NULL AND v_found.run_status NOT IN
              ('completed', 'failed', 'cancelled', 'compensated', 'compensation_failed') THEN
            RAISE EXCEPTION 'run % has no update %', v_found.run_id, p_update_id
                USING ERRCODE = 'P0002';
        ELSIF v_found.run_status IN ('completed', 'failed', 'cancelled', 'compensated',
                                     'compensation_failed', 'continued') THEN
            RAISE EXCEPTION 'run % is %: it did not reply to update %', v_found.run_id,
                            v_found.run_status, p_update_id
                USING ERRCODE = '55000';
        END IF;
        IF clock_timestamp() >= v_deadline THEN
            RAISE EXCEPTION 'no reply to update % of run % within % s: it stays requested',
                            p_update_id, v_found.run_id, p_timeout_s
                USING ERRCODE = 'PU003';
        END IF;
        PERFORM pg_sleep(least(v_pause,
                               greatest(extract(epoch FROM v_deadline - clock_timestamp()), 0)));
        v_pause := least(v_pause * 2, 0.1);
    END LOOP;
END
$$;

-- The SECURITY DEFINER functions above are created with the migrator's own
-- path (<schema>, pg_catalog, pg_temp); pinned here to pg_catalog, <schema>,
-- pg_temp, the temporary schema last (as migrate.pin_functions does again for
-- every function after each migration).
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION send_update(text, text, jsonb, text) '
                   'SET search_path = pg_catalog, %I, pg_temp', current_schema());
    EXECUTE format('ALTER FUNCTION update_reply(text, text, double precision) '
                   'SET search_path = pg_catalog, %I, pg_temp', current_schema());
END
$$;
