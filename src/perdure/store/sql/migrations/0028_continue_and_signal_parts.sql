-- perdure schema, version 28: continue_run and send_signal (the internal
-- form, with p_now) in parts, each part a function of its own. Both grew by
-- blocks added in later migrations (0022: a signal for a continued run goes
-- to the end of its chain; 0024: update requests carried over; 0025: a race
-- woken by a signal's name); each main function now reads as the steps it
-- takes, in the same order, with the same locks, rows, history and errors.
--
-- continue_run: successor_version (which version and queue the successor
-- runs), insert_successor (its row, its task), carry_over (the signals and
-- update requests the old run never took).
-- send_signal: signal_run (the run by id or key, locked, the end of its
-- chain, refused when finished), signal_take_wait (a parked wait for the
-- signal's name takes it at once), signal_wake (the tasks waiting for it,
-- or a race with a member for it, made due).
--
-- The parts are internal: like every function of the schema they are kept
-- from PUBLIC and pinned by the migrator (worker roles execute them through
-- the schema's default privileges, as they do continue_run).

-- successor_version: the version and queue a successor of a run of
-- p_workflow (version p_version, queue p_queue) runs on: with p_newest the
-- newest version registered above p_version, with that version's queue;
-- else, or when there is none, the run's own.
CREATE FUNCTION successor_version(
    p_workflow text, p_version integer, p_queue text, p_newest boolean
) RETURNS TABLE (new_version integer, new_queue text)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_found integer;
    v_in    text;
BEGIN
    IF p_newest THEN
        SELECT w.version, w.queue INTO v_found, v_in FROM workflows w
        WHERE w.name = p_workflow AND w.version > p_version
        ORDER BY w.version DESC LIMIT 1;
        IF v_found IS NOT NULL THEN
            RETURN QUERY SELECT v_found, v_in;
            RETURN;
        END IF;
    END IF;
    RETURN QUERY SELECT p_version, p_queue;
END
$$;

-- insert_successor: the successor p_new_id of p_run, queued with p_input on
-- p_version and p_queue, with the key, lineage and settings of p_run, and
-- its task, due at p_now.
CREATE FUNCTION insert_successor(
    p_run runs, p_new_id uuid, p_input jsonb, p_version integer, p_queue text,
    p_now timestamptz
) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    INSERT INTO runs (id, workflow, version, queue, key, status, input, parent_run_id,
                      created_at, updated_at, deadline_at, priority, partition_key, tags,
                      trace_context, continued_from)
    VALUES (p_new_id, p_run.workflow, p_version, p_queue, p_run.key, 'queued', p_input,
            p_run.parent_run_id, p_now, p_now, p_run.deadline_at, p_run.priority,
            p_run.partition_key, p_run.tags, p_run.trace_context, p_run.id);
    INSERT INTO tasks (run_id, kind, queue, workflow, version, priority, partition_key,
                       status, available_at, created_at)
    VALUES (p_new_id, 'run', p_queue, p_run.workflow, p_version, p_run.priority,
            p_run.partition_key, 'ready', p_now, p_now);
END
$$;

-- carry_over: what the run p_from never took becomes its successor p_to's:
-- its unconsumed signals and its update requests not yet decided, in their
-- order (their ids).
CREATE FUNCTION carry_over(p_from uuid, p_to uuid) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    UPDATE signals SET run_id = p_to WHERE run_id = p_from AND consumed_at IS NULL;
    UPDATE updates SET run_id = p_to WHERE run_id = p_from AND status = 'requested';
END
$$;

-- continue_run, as in migration 0024, in parts.
CREATE OR REPLACE FUNCTION continue_run(
    p_task_id bigint, p_worker_id text, p_attempt integer, p_new_id uuid, p_input jsonb,
    p_newest boolean, p_now timestamptz
) RETURNS TABLE (leased boolean, changed boolean, new_id uuid, new_version integer)
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_run_id  uuid;
    v_run     runs%ROWTYPE;
    v_version integer;
    v_queue   text;
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
    SELECT s.new_version, s.new_queue INTO v_version, v_queue
    FROM successor_version(v_run.workflow, v_run.version, v_run.queue, p_newest) s;
    UPDATE runs
    SET status = 'continued', key = NULL, continued_to = p_new_id, waiting_for = NULL,
        completed_at = p_now, updated_at = p_now
    WHERE id = v_run_id;
    PERFORM insert_successor(v_run, p_new_id, p_input, v_version, v_queue, p_now);
    PERFORM carry_over(v_run_id, p_new_id);
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

-- signal_run: the run a signal to p_run (an id, else a key) is for, locked:
-- the last run of its chain when it continued as new (the old run's lock
-- first, which orders the signal against continue_run). P0002 when there is
-- none; 55000 when that run is finished.
CREATE FUNCTION signal_run(p_run text) RETURNS runs
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_run runs%ROWTYPE;
BEGIN
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
    RETURN v_run;
END
$$;

-- signal_take_wait: when the waiting run p_run_id is parked at a wait for
-- the signal p_name (its task ready, not locked by another), its oldest
-- unconsumed signal of that name completes the wait at once, at p_now.
CREATE FUNCTION signal_take_wait(p_run_id uuid, p_name text, p_now timestamptz) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_task     bigint;
    v_position integer;
    v_taken    bigint;
    v_payload  jsonb;
BEGIN
    SELECT t.id, s.position INTO v_task, v_position
    FROM tasks t JOIN steps s ON s.run_id = t.run_id
    WHERE t.run_id = p_run_id AND t.kind = 'run' AND t.status = 'ready'
      AND t.wait_signal = p_name
      AND s.status = 'waiting' AND s.kind = 'signal' AND s.name = 'signal:' || p_name
    FOR UPDATE OF t SKIP LOCKED;
    IF v_task IS NULL THEN
        RETURN;
    END IF;
    UPDATE signals SET consumed_at = p_now, consumed_position = v_position
    WHERE id = (SELECT id FROM signals
                WHERE run_id = p_run_id AND name = p_name AND consumed_at IS NULL
                ORDER BY id LIMIT 1)
    RETURNING id, payload INTO v_taken, v_payload;
    UPDATE steps SET status = 'completed', output = v_payload, completed_at = p_now
    WHERE run_id = p_run_id AND position = v_position AND status = 'waiting';
    INSERT INTO history (run_id, at, event, step_position, step_name, detail)
    VALUES (p_run_id, p_now, 'signal_consumed', v_position, 'signal:' || p_name,
            jsonb_build_object('signal_id', v_taken));
END
$$;

-- signal_wake: make due at p_now the ready tasks of the run p_run_id that
-- wait for the signal p_name, and its run task when the run (p_status,
-- p_waiting_for as read under its lock) is parked at a race with a member
-- for that name (migration 0025). Tasks locked by another are left alone.
CREATE FUNCTION signal_wake(
    p_run_id uuid, p_status text, p_waiting_for jsonb, p_name text, p_now timestamptz
) RETURNS void
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    UPDATE tasks SET available_at = p_now
    WHERE id IN (SELECT id FROM tasks
                 WHERE run_id = p_run_id AND status = 'ready'
                   AND (wait_signal = p_name
                        OR (p_status = 'waiting' AND kind = 'run'
                            AND coalesce(p_waiting_for -> 'signals', '[]') ? p_name))
                 FOR UPDATE SKIP LOCKED);
END
$$;

-- send_signal with p_now, as in migration 0025, in parts.
CREATE OR REPLACE FUNCTION send_signal(
    p_run text, p_name text, p_payload jsonb, p_key text, p_now timestamptz
) RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_run runs%ROWTYPE;
    v_id  bigint;
    v_now timestamptz := check_time('now', coalesce(p_now, now()));
BEGIN
    IF p_name IS NULL OR p_name = '' THEN
        RAISE EXCEPTION 'a signal needs a name' USING ERRCODE = '22023';
    END IF;
    PERFORM check_text('signal name', p_name, 128);
    PERFORM check_text('signal key', p_key, 512);
    PERFORM check_json('the signal''s payload', p_payload, 134217728);
    v_run := signal_run(p_run);
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
        PERFORM signal_take_wait(v_run.id, p_name, v_now);
    END IF;
    PERFORM signal_wake(v_run.id, v_run.status, v_run.waiting_for, p_name, v_now);
    RETURN v_id;
END
$$;
