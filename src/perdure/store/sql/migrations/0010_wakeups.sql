-- perdure schema, version 10: waking runs without scanning or round trips.
--
-- 1. tasks_due_idx orders each queue's ready tasks by due time alone. An idle
--    worker asks when the next task of its queues is due (task_next_due):
--    with this index that is the first entry of each queue, however many runs
--    sleep or wait for a signal. tasks_ready_idx, ordered by priority first,
--    would have to be read to its end.
-- 2. send_signal delivers the signal itself when the run is parked at
--    ctx.wait_for_signal for it: the wait's checkpoint completes with the
--    payload, the signal is consumed, and the task becomes due, all in the
--    sender's transaction. The worker that claims the run replays past the
--    wait without another transaction. A run whose task a worker is claiming
--    at that moment, a paused run, and a graph step's gate are left as
--    before: their worker takes the signal after this commit.

CREATE INDEX tasks_due_idx ON tasks (queue, available_at) WHERE status = 'ready';

CREATE OR REPLACE FUNCTION send_signal(
    p_run text, p_name text, p_payload jsonb DEFAULT 'null', p_key text DEFAULT NULL,
    p_now timestamptz DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_run      runs%ROWTYPE;
    v_id       bigint;
    v_now      timestamptz := coalesce(p_now, now());
    v_task     bigint;
    v_position integer;
    v_taken    bigint;
    v_payload  jsonb;
BEGIN
    IF p_name IS NULL OR p_name = '' THEN
        RAISE EXCEPTION 'a signal needs a name' USING ERRCODE = '22023';
    END IF;
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
        -- The run's row lock (above) orders this against the wait: the run
        -- parked before this transaction, and no worker holds its task.
        SELECT t.id, s.position INTO v_task, v_position
        FROM tasks t JOIN steps s ON s.run_id = t.run_id
        WHERE t.run_id = v_run.id AND t.kind = 'run' AND t.status = 'ready'
          AND t.wait_signal = p_name
          AND s.status = 'waiting' AND s.kind = 'signal' AND s.name = 'signal:' || p_name
        FOR UPDATE OF t SKIP LOCKED;
    END IF;
    IF v_task IS NOT NULL THEN
        -- The oldest pending signal of that name, as the worker would take.
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
    -- SKIP LOCKED: a task being claimed right now belongs to a worker that
    -- will look for signals after this commit.
    UPDATE tasks SET available_at = v_now
    WHERE id IN (SELECT id FROM tasks
                 WHERE run_id = v_run.id AND status = 'ready' AND wait_signal = p_name
                 FOR UPDATE SKIP LOCKED);
    RETURN v_id;
END
$$;
