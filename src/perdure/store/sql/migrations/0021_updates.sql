-- Updates: a request sent into a running run, validated by its worker, applied
-- by a handler as part of the run's execution, and answered (docs/updates.md).
--
-- A request is written 'requested' (nothing in the run's history); its
-- worker refuses it ('rejected', still nothing in the history) or accepts it
-- ('accepted': history event update_accepted, the wait position it is
-- applied at and its order there), then replies ('completed' with a result,
-- or 'failed' with an error). update_id is unique per run: a retried request
-- finds the first one and its reply.
CREATE TABLE updates (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id          uuid        NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    update_id       text        NOT NULL,
    name            text        NOT NULL,
    payload         jsonb       NOT NULL,
    status          text        NOT NULL DEFAULT 'requested'
                    CHECK (status IN ('requested', 'accepted', 'rejected', 'completed', 'failed')),
    result          jsonb,
    error           jsonb,
    anchor_position integer,
    seq             integer,
    created_at      timestamptz NOT NULL,
    accepted_at     timestamptz,
    completed_at    timestamptz,
    UNIQUE (run_id, update_id)
);

CREATE INDEX updates_requested_idx ON updates (run_id, id) WHERE status = 'requested';

-- request_update: record update p_update_id of run p_run_id unless it exists,
-- and wake the run if it waits, in one transaction. The run's row is locked
-- first, as send_signal does: a wait that parks concurrently either sees this
-- request or has committed its 'waiting' state, which the statements below
-- (each with a snapshot taken after the lock) see. Returns the run's status;
-- a finished run takes no request.
CREATE FUNCTION request_update(
    p_run_id uuid, p_update_id text, p_name text, p_payload jsonb, p_now timestamptz
) RETURNS text
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
DECLARE
    v_status text;
    v_id     bigint;
BEGIN
    SELECT status INTO v_status FROM runs WHERE id = p_run_id FOR UPDATE;
    IF v_status IS NULL OR v_status IN ('completed', 'failed', 'cancelled', 'compensated',
                                        'compensation_failed') THEN
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

-- Wake the caller waiting for a reply (app.update) the moment it is written:
-- NOTIFY <schema>_messages with the run's id (notify_message, migration 0013)
-- when a request is decided for good (rejected, completed or failed).
CREATE TRIGGER updates_notify AFTER UPDATE OF status ON updates
    FOR EACH ROW
    WHEN (NEW.status IN ('rejected', 'completed', 'failed')
          AND OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION notify_message();
