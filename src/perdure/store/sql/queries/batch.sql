-- Named queries that write the checkpoints of many runs in one statement: the
-- worker's group commit (engine/commit.py) sends the completed steps of all
-- its runs as one step_checkpoint_many and their completions as one
-- run_complete_step_many. Each input row is fenced on its own task, as a
-- single step_checkpoint is; a row whose fence fails writes nothing and is
-- reported as not leased, without touching the others. The answer has one
-- row per input.

-- name: step_checkpoint_many
-- step_checkpoint for completed plain steps of several runs. The input is in
-- task id order and task rows are locked in that order, as every other
-- writer of several tasks does.
WITH input AS (
    SELECT * FROM unnest(%(task_ids)s::bigint[], %(worker_ids)s::text[], %(attempts)s::integer[],
                         %(positions)s::integer[], %(names)s::text[],
                         %(step_attempts)s::integer[], %(outputs)s::jsonb[],
                         %(started)s::timestamptz[])
        WITH ORDINALITY AS i(task_id, worker_id, attempt, position, name, step_attempts, output,
                             started_at, n)
), lease AS (
    UPDATE {schema}.tasks t
    SET lease_expires_at = {now} + make_interval(secs => %(lease_seconds)s)
    FROM input i
    WHERE t.id = i.task_id AND t.worker_id = i.worker_id AND t.attempt = i.attempt
      AND t.status = 'claimed'
    RETURNING t.id AS task_id, t.run_id
), checkpoint AS (
    INSERT INTO {schema}.steps (run_id, position, name, kind, status, attempts, output, error,
                                worker_id, started_at, completed_at)
    SELECT l.run_id, i.position, i.name, 'step', 'completed', i.step_attempts, i.output, NULL,
           i.worker_id, i.started_at, coalesce(%(now)s::timestamptz, clock_timestamp())
    FROM input i JOIN lease l ON l.task_id = i.task_id
    ORDER BY i.n
    ON CONFLICT (run_id, position) DO UPDATE
    SET status = EXCLUDED.status, attempts = EXCLUDED.attempts, output = EXCLUDED.output,
        error = EXCLUDED.error, worker_id = EXCLUDED.worker_id,
        started_at = EXCLUDED.started_at, completed_at = EXCLUDED.completed_at
    WHERE {schema}.steps.status IN ('pending', 'retrying', 'waiting')
      AND {schema}.steps.name = EXCLUDED.name
    RETURNING run_id, position, name, attempts, worker_id
), event AS (
    INSERT INTO {schema}.history (run_id, at, event, step_position, step_name, attempt, worker_id)
    SELECT run_id, {now}, 'step_completed', position, name, attempts, worker_id
    FROM checkpoint
)
-- Membership tests (hashed subplans) rather than joins of the CTEs: the
-- planner cannot size a CTE's answer and would join them in nested loops.
SELECT i.task_id, (i.task_id IN (SELECT task_id FROM lease))::int AS leased,
       coalesce((l.run_id, i.position) IN (SELECT run_id, position FROM checkpoint),
                false)::int AS written,
       r.status AS run_status
FROM input i
LEFT JOIN {schema}.tasks l ON l.id = i.task_id
LEFT JOIN {schema}.runs r ON r.id = l.run_id AND i.task_id IN (SELECT task_id FROM lease)
ORDER BY i.n;

-- name: run_complete_step_many
-- For each input run: record its last step's checkpoint and finish the run
-- with its output, in one statement (also used for a single run): the hot
-- path's last round trip does both. Fenced like step_checkpoint. The task is
-- deleted and the run completed only when the checkpoint was written: a
-- position that already holds a final checkpoint (a stale replay) writes
-- nothing and leaves the task held, so the caller hands it back and the run
-- is replayed from the real history. A run cancelled while its last step ran
-- keeps its checkpoint and stays cancelled; its task is deleted.
WITH input AS (
    SELECT * FROM unnest(%(task_ids)s::bigint[], %(worker_ids)s::text[], %(attempts)s::integer[],
                         %(positions)s::integer[], %(names)s::text[], %(kinds)s::text[],
                         %(step_attempts)s::integer[], %(step_outputs)s::jsonb[],
                         %(started)s::timestamptz[], %(outputs)s::jsonb[])
        WITH ORDINALITY AS i(task_id, worker_id, attempt, position, name, kind, step_attempts,
                             step_output, started_at, output, n)
), lease AS (
    SELECT t.id AS task_id, t.run_id
    FROM {schema}.tasks t JOIN input i ON t.id = i.task_id
    WHERE t.worker_id = i.worker_id AND t.attempt = i.attempt AND t.status = 'claimed'
    ORDER BY t.id
    FOR UPDATE OF t
), checkpoint AS (
    INSERT INTO {schema}.steps (run_id, position, name, kind, status, attempts, output, error,
                                worker_id, started_at, completed_at)
    SELECT l.run_id, i.position, i.name, i.kind, 'completed', i.step_attempts, i.step_output,
           NULL, i.worker_id, i.started_at, coalesce(%(now)s::timestamptz, clock_timestamp())
    FROM input i JOIN lease l ON l.task_id = i.task_id
    ORDER BY i.n
    ON CONFLICT (run_id, position) DO UPDATE
    SET status = EXCLUDED.status, attempts = EXCLUDED.attempts, output = EXCLUDED.output,
        error = EXCLUDED.error, worker_id = EXCLUDED.worker_id,
        started_at = EXCLUDED.started_at, completed_at = EXCLUDED.completed_at
    WHERE {schema}.steps.status IN ('pending', 'retrying', 'waiting')
      AND {schema}.steps.name = EXCLUDED.name
    RETURNING run_id, position, name, attempts, worker_id
), done AS (
    -- One unit per run here, so the run's checkpoint names its task.
    DELETE FROM {schema}.tasks t
    USING checkpoint c
    WHERE t.run_id = c.run_id AND t.id = ANY(%(task_ids)s::bigint[])
    RETURNING t.id AS task_id, t.run_id
), finished AS (
    UPDATE {schema}.runs r
    SET status = 'completed', output = i.output, error = NULL, waiting_for = NULL,
        completed_at = {now}, updated_at = {now}
    FROM done d JOIN input i ON i.task_id = d.task_id
    WHERE r.id = d.run_id AND r.status IN ('running', 'paused')
    RETURNING r.id, i.task_id, i.attempt, i.worker_id
), leftovers AS (
    DELETE FROM {schema}.tasks
    WHERE id IN (SELECT t.id FROM {schema}.tasks t JOIN done d ON t.run_id = d.run_id
                 WHERE t.id <> d.task_id AND t.status <> 'claimed'
                 FOR UPDATE OF t SKIP LOCKED)
), event AS (
    INSERT INTO {schema}.history (run_id, at, event, step_position, step_name, attempt, worker_id)
    SELECT run_id, {now}, 'step_completed', position, name, attempts, worker_id
    FROM checkpoint
    UNION ALL
    SELECT id, {now}, 'run_completed', NULL, NULL, attempt, worker_id
    FROM finished
)
-- Membership tests (hashed subplans) rather than joins of the CTEs: the
-- planner cannot size a CTE's answer and would join them in nested loops.
-- A task is deleted exactly when its run's checkpoint was written.
SELECT i.task_id, (i.task_id IN (SELECT task_id FROM lease))::int AS leased,
       (i.task_id IN (SELECT task_id FROM done))::int AS written,
       (i.task_id IN (SELECT task_id FROM finished))::int AS changed
FROM input i
ORDER BY i.n;
