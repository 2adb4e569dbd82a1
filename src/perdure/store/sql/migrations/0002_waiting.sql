-- perdure schema, version 2: waiting without holding a worker.
--
-- Durable timers and signal waits are step checkpoints in status 'waiting'
-- with their wake time in steps.wake_at; the run's task waits in the queue
-- with available_at at that time. Signals, events and streams get tables of
-- their own. A paused run's task has status 'paused' and is never claimed.

ALTER TABLE steps DROP CONSTRAINT steps_status_check;
ALTER TABLE steps ADD CONSTRAINT steps_status_check
    CHECK (status IN ('completed', 'failed', 'retrying', 'waiting', 'timed_out'));
ALTER TABLE steps DROP CONSTRAINT steps_kind_check;
ALTER TABLE steps ADD CONSTRAINT steps_kind_check
    CHECK (kind IN ('step', 'transaction', 'sleep', 'signal', 'event', 'stream'));
ALTER TABLE steps ADD COLUMN wake_at timestamptz;

-- What a waiting run waits for: {"sleep": true, "until": ...} or
-- {"signal": "<name>", "until": ...}; NULL when it is not waiting.
ALTER TABLE runs ADD COLUMN waiting_for jsonb;
ALTER TABLE runs ADD COLUMN cancel_reason text;
-- app.start(..., timeout=): past this time the run is cancelled ("deadline").
ALTER TABLE runs ADD COLUMN deadline_at timestamptz;
CREATE INDEX runs_deadline_at_idx ON runs (deadline_at)
    WHERE deadline_at IS NOT NULL AND status IN ('queued', 'running', 'waiting', 'paused');

ALTER TABLE tasks DROP CONSTRAINT tasks_status_check;
ALTER TABLE tasks ADD CONSTRAINT tasks_status_check CHECK (status IN ('ready', 'claimed', 'paused'));

-- Signals are kept until a wait consumes them, in arrival order, one per wait.
-- (run_id, key) makes sending idempotent: the same key twice is one signal.
CREATE TABLE signals (
    id                bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id            uuid        NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    name              text        NOT NULL,
    payload           jsonb       NOT NULL,
    key               text,
    created_at        timestamptz NOT NULL,
    consumed_at       timestamptz,
    consumed_position integer,
    UNIQUE (run_id, key)
);
CREATE INDEX signals_pending_idx ON signals (run_id, name, id) WHERE consumed_at IS NULL;

-- Events: the latest value a run published under a key (ctx.set_event).
CREATE TABLE events (
    run_id     uuid        NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    key        text        NOT NULL,
    value      jsonb       NOT NULL,
    position   integer     NOT NULL,
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (run_id, key)
);

-- Streams: ordered values a run appends under a key (ctx.write_stream); a row
-- with closed = true ends the stream.
CREATE TABLE streams (
    run_id     uuid        NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    key        text        NOT NULL,
    seq        integer     NOT NULL,
    value      jsonb,
    closed     boolean     NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (run_id, key, seq)
);

-- send_signal: record a signal to a run and wake the run if it waits for it,
-- in one transaction. perdure's own app.signal calls this function, and so
-- can a webhook written in any language:
--     SELECT perdure.send_signal('checkout:9182', 'shipment_created',
--                                '{"tracking": "Z1"}', 'ship-77');
-- p_run is a run id or key. An unknown run raises SQLSTATE P0002, a finished
-- one 55000. A repeated key returns the first signal's id and wakes nothing.
-- The run row is locked first: a wait that starts concurrently either sees
-- this signal or has already published what it waits for.
CREATE FUNCTION send_signal(
    p_run text, p_name text, p_payload jsonb DEFAULT 'null', p_key text DEFAULT NULL,
    p_now timestamptz DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_run runs%ROWTYPE;
    v_id  bigint;
    v_now timestamptz := coalesce(p_now, now());
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
    IF v_run.status IN ('completed', 'failed', 'cancelled') THEN
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
    IF v_run.waiting_for ->> 'signal' = p_name THEN
        -- SKIP LOCKED: a task being claimed right now belongs to a worker
        -- that will look for signals after this commit.
        UPDATE tasks SET available_at = v_now
        WHERE id IN (SELECT id FROM tasks
                     WHERE run_id = v_run.id AND status = 'ready'
                     FOR UPDATE SKIP LOCKED);
    END IF;
    RETURN v_id;
END
$$;
