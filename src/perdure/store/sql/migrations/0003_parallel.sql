-- perdure schema, version 3: parallel steps, graph workflows, child workflows
-- and saga compensation.
--
-- A parallel step (a branch of ctx.gather / ctx.map, a node of a graph) is a
-- step row in status 'pending' with a task of kind 'step' that any worker can
-- claim. A run whose work failed for good runs its compensations in status
-- 'compensating' and ends 'compensated' or 'compensation_failed'.

ALTER TABLE runs DROP CONSTRAINT runs_status_check;
ALTER TABLE runs ADD CONSTRAINT runs_status_check CHECK (status IN
    ('queued', 'running', 'waiting', 'paused', 'compensating',
     'completed', 'failed', 'cancelled', 'compensated', 'compensation_failed'));
-- A run's children, for cancellation and for the dashboard's run tree.
CREATE INDEX runs_parent_run_id_idx ON runs (parent_run_id) WHERE parent_run_id IS NOT NULL;

ALTER TABLE steps DROP CONSTRAINT steps_status_check;
ALTER TABLE steps ADD CONSTRAINT steps_status_check CHECK (status IN
    ('pending', 'waiting', 'retrying', 'completed', 'failed', 'timed_out', 'skipped',
     'cancelled'));
ALTER TABLE steps DROP CONSTRAINT steps_kind_check;
ALTER TABLE steps ADD CONSTRAINT steps_kind_check CHECK (kind IN
    ('step', 'transaction', 'sleep', 'signal', 'event', 'stream', 'gather', 'child',
     'child_result', 'compensation'));

-- The signal a parked task waits for: send_signal wakes exactly those tasks.
-- Set by a function workflow's wait_for_signal and by a graph step's gate.
ALTER TABLE tasks ADD COLUMN wait_signal text;
-- A gather's parallel step records where its gather starts: the worker that
-- executes it replays the steps before that position, not its siblings.
ALTER TABLE tasks ADD COLUMN gather_start integer;
-- Runs already parked at a signal wait when this migration runs keep being
-- woken by their signal.
UPDATE tasks t SET wait_signal = r.waiting_for ->> 'signal'
FROM runs r
WHERE r.id = t.run_id AND t.kind = 'run' AND t.status IN ('ready', 'paused')
  AND r.waiting_for ? 'signal';

CREATE OR REPLACE FUNCTION send_signal(
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
    -- SKIP LOCKED: a task being claimed right now belongs to a worker that
    -- will look for signals after this commit.
    UPDATE tasks SET available_at = v_now
    WHERE id IN (SELECT id FROM tasks
                 WHERE run_id = v_run.id AND status = 'ready' AND wait_signal = p_name
                 FOR UPDATE SKIP LOCKED);
    RETURN v_id;
END
$$;

-- When a run finishes, in the same transaction:
--  * its parent, if parked waiting for a child (waiting_for has "child"),
--    becomes due, so `await child.result()` resumes at once;
--  * its unfinished children are cancelled when it did not complete
--    (cancelled, failed, compensated or compensation_failed), which cascades
--    down the tree through this same trigger.
-- Times come from the finishing row's updated_at: the statement's clock.
CREATE FUNCTION run_finished() RETURNS trigger
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    IF NEW.parent_run_id IS NOT NULL THEN
        UPDATE tasks SET available_at = least(available_at, NEW.updated_at)
        WHERE id IN (SELECT t.id FROM tasks t JOIN runs p ON p.id = t.run_id
                     WHERE t.run_id = NEW.parent_run_id AND t.kind = 'run'
                       AND t.status = 'ready' AND p.waiting_for ? 'child'
                     FOR UPDATE OF t SKIP LOCKED);
    END IF;
    IF NEW.status <> 'completed' THEN
        WITH children AS (
            UPDATE runs c
            SET status = 'cancelled', completed_at = NEW.updated_at, updated_at = NEW.updated_at,
                waiting_for = NULL, cancel_reason = 'parent run ' || NEW.status,
                error = jsonb_build_object('type', 'Cancelled',
                                           'message', 'parent run ' || NEW.status)
            WHERE c.parent_run_id = NEW.id
              AND c.status NOT IN ('completed', 'failed', 'cancelled', 'compensated',
                                   'compensation_failed')
            RETURNING c.id
        ), dropped AS (
            DELETE FROM tasks t USING children c
            WHERE t.run_id = c.id AND t.status <> 'claimed'
        )
        INSERT INTO history (run_id, at, event, detail)
        SELECT id, NEW.updated_at, 'run_cancelled',
               jsonb_build_object('reason', 'parent run ' || NEW.status, 'parent', NEW.id)
        FROM children;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER runs_finished AFTER UPDATE OF status ON runs
    FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status
          AND NEW.status IN ('completed', 'failed', 'cancelled', 'compensated',
                             'compensation_failed'))
    EXECUTE FUNCTION run_finished();
