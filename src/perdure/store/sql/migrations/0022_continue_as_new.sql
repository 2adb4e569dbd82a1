-- perdure schema, version 22: continue-as-new.
--
-- A run that calls ctx.continue_as_new ends in status 'continued' and its
-- successor starts in the same statement (continue_run): a new run of the
-- same workflow (the same version, or the newest registered one when asked),
-- with the new input, the key (moved from the old run, whose key is cleared
-- so the unique index holds), the lineage (continued_from on the successor,
-- continued_to on the old run) and the old run's unconsumed signals. The old
-- run's history stops growing: the chain's history is per run, bounded by
-- what one run of the chain records.

ALTER TABLE runs DROP CONSTRAINT runs_status_check;
ALTER TABLE runs ADD CONSTRAINT runs_status_check CHECK (status IN
    ('queued', 'running', 'waiting', 'paused', 'compensating',
     'completed', 'failed', 'cancelled', 'compensated', 'compensation_failed', 'continued'));

ALTER TABLE runs ADD COLUMN continued_from uuid;
ALTER TABLE runs ADD COLUMN continued_to uuid;
-- The archive keeps the same columns, in the same order (prune copies r.*).
ALTER TABLE archive_runs ADD COLUMN continued_from uuid;
ALTER TABLE archive_runs ADD COLUMN continued_to uuid;
-- The predecessor of a run, for `perdure runs show` and the dashboard.
CREATE INDEX runs_continued_from_idx ON runs (continued_from) WHERE continued_from IS NOT NULL;

-- continue_run: end the run whose task p_task_id the worker p_worker_id holds
-- (attempt p_attempt) as 'continued' and start its successor p_new_id with
-- p_input, all or nothing. Fenced like run_complete: a lease that is not the
-- caller's writes nothing (leased false). A run that stopped meanwhile
-- (cancelled) loses its task and starts no successor (changed false). With
-- p_newest the successor runs the newest version registered for the
-- workflow (with that version's queue), else the old run's version.
CREATE FUNCTION continue_run(
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

-- chain_end: the last run of the chain p_id belongs to (p_id itself when it
-- was not continued): where a caller waiting on p_id's result finds it.
CREATE FUNCTION chain_end(p_id uuid) RETURNS uuid
LANGUAGE sql STABLE
AS $$
WITH RECURSIVE chain (id, next, depth) AS (
    SELECT id, continued_to, 0 FROM runs WHERE id = p_id
    UNION ALL
    SELECT r.id, r.continued_to, c.depth + 1
    FROM chain c JOIN runs r ON r.id = c.next
    WHERE c.depth < 1000000
)
SELECT id FROM chain ORDER BY depth DESC LIMIT 1
$$;

-- run_status (migration 0011) follows a continued run's chain: the status,
-- output and error are those of the chain's last run, whose id it answers.
CREATE OR REPLACE FUNCTION run_status(p_run text) RETURNS TABLE (
    id uuid, workflow text, version integer, key text, status text, output jsonb, error jsonb,
    created_at timestamptz, started_at timestamptz, completed_at timestamptz
)
LANGUAGE plpgsql STABLE
SECURITY DEFINER
SET search_path FROM CURRENT
AS $$
DECLARE
    v_run runs%ROWTYPE := find_run(p_run);
BEGIN
    IF v_run.continued_to IS NOT NULL THEN
        SELECT * INTO v_run FROM runs r WHERE r.id = chain_end(v_run.id);
    END IF;
    RETURN QUERY SELECT v_run.id, v_run.workflow, v_run.version, v_run.key, v_run.status,
                        v_run.output, v_run.error, v_run.created_at, v_run.started_at,
                        v_run.completed_at;
END
$$;

-- send_signal (migration 0017, the internal form with p_now) sends a signal
-- for a run that continued as new to the last run of its chain. The old
-- run's row lock orders it against continue_run, which locks that row too:
-- a signal committed first is carried over with the others, one sent after
-- finds the successor.
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
                 WHERE run_id = v_run.id AND status = 'ready' AND wait_signal = p_name
                 FOR UPDATE SKIP LOCKED);
    RETURN v_id;
END
$$;

-- The SECURITY DEFINER functions above are created with the migrator's own
-- path (<schema>, pg_catalog, pg_temp); pinned here to pg_catalog, <schema>,
-- pg_temp, the temporary schema last (as migrate.pin_functions does again for
-- every function after each migration).
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION run_status(text) '
                   'SET search_path = pg_catalog, %I, pg_temp', current_schema());
END
$$;
