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
