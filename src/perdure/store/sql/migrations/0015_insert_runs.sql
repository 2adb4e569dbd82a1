-- perdure schema, version 15: starts written as a set.
--
-- insert_runs is the one definition of a start, for one run or many: the
-- runs of one workflow with their ids, keys and inputs (item n of the
-- arrays is start n), their first tasks and their history rows, written by
-- three set-based inserts instead of three statements per run. insert_run
-- (app.start, start_run) is insert_runs with one item; app.start_many and
-- the starts written together call insert_runs with many.
--
-- The answer has one row per item that has a run, numbered n (1-based):
-- created true for a run this call inserted; for a key already taken (or
-- repeated in the items, the first one wins) or a dedup key whose run waits
-- to start, that run, created false. An item whose conflicting run was
-- inserted concurrently and is not visible yet has no row: the caller starts
-- it again. A workflow registered nowhere (p_lookup) writes nothing and
-- answers each item with a NULL id.
CREATE FUNCTION insert_runs(
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
SET search_path FROM CURRENT
AS $$
#variable_conflict use_column
DECLARE
    v_version integer := p_version;
    v_queue   text := p_queue;
    v_found   integer;
    v_in      text;
    v_created uuid[];
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
        -- Every item made a run (the usual case): nothing to look up.
        RETURN QUERY SELECT u.n, u.id, p_workflow, 'queued'::text, p_now, true
                     FROM unnest(p_ids) WITH ORDINALITY AS u(id, n);
        RETURN;
    END IF;
    -- A statement of its own: it sees the runs whose inserts this one waited
    -- for, and those inserted above for a key repeated in the items.
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

CREATE OR REPLACE FUNCTION insert_run(
    p_id uuid, p_workflow text, p_version integer, p_queue text, p_key text, p_input jsonb,
    p_now timestamptz, p_priority integer DEFAULT 0, p_delay_seconds float8 DEFAULT 0,
    p_parent_run_id uuid DEFAULT NULL, p_timeout_seconds float8 DEFAULT NULL,
    p_partition_key text DEFAULT NULL, p_dedup_key text DEFAULT NULL, p_tags jsonb DEFAULT NULL,
    p_trace_context jsonb DEFAULT NULL, p_newest boolean DEFAULT false,
    p_lookup boolean DEFAULT false
) RETURNS TABLE (id uuid, workflow text, status text, created_at timestamptz, created boolean)
LANGUAGE sql
SET search_path FROM CURRENT
AS $$
    SELECT r.id, r.workflow, r.status, r.created_at, r.created
    FROM insert_runs(ARRAY[p_id], p_workflow, p_version, p_queue, ARRAY[p_key],
                     ARRAY[p_input], p_now, p_priority, p_delay_seconds, p_parent_run_id,
                     p_timeout_seconds, p_partition_key, p_dedup_key, p_tags, p_trace_context,
                     p_newest, p_lookup) AS r
$$;
