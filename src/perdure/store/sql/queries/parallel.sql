-- Named queries for parallel steps (ctx.gather, ctx.map), graph workflows
-- and their compensations. A parallel step is a 'pending' step row plus a
-- task of kind 'step'. Statements that decide what runs next are executed in
-- a transaction that first took run_lock: completions of one run's steps
-- serialise there, and each sees the others' commits.

-- name: step_fanout
-- Park a function workflow at a gather: the parallel steps at %(positions)s
-- that have neither a final checkpoint nor a task get a 'pending' row and a
-- task any worker can claim; the run's own task waits for them without
-- holding a slot (it is due now if nothing is left to wait for). Fenced.
WITH branches AS (
    SELECT b.position, b.name
    FROM unnest(%(positions)s::integer[], %(names)s::text[]) AS b(position, name)
), held AS (
    SELECT run_id, queue, workflow, version, priority, partition_key
    FROM {schema}.tasks
    WHERE id = %(task_id)s AND worker_id = %(worker_id)s AND attempt = %(attempt)s
      AND status = 'claimed'
), todo AS (
    SELECT b.position, b.name FROM branches b, held h
    WHERE NOT EXISTS (SELECT 1 FROM {schema}.tasks t
                      WHERE t.run_id = h.run_id AND t.kind = 'step'
                        AND t.step_position = b.position)
      AND NOT EXISTS (SELECT 1 FROM {schema}.steps s
                      WHERE s.run_id = h.run_id AND s.position = b.position
                        AND s.status IN ('completed', 'failed', 'skipped', 'cancelled'))
), lease AS (
    UPDATE {schema}.tasks
    SET status = 'ready', worker_id = NULL, lease_expires_at = NULL, claimed_at = NULL,
        available_at = CASE
            WHEN EXISTS (SELECT 1 FROM todo)
                 OR EXISTS (SELECT 1 FROM {schema}.tasks o, held h
                            WHERE o.run_id = h.run_id AND o.kind = 'step')
            THEN {now} + make_interval(secs => %(seconds)s)
            ELSE {now} END
    WHERE id = %(task_id)s AND worker_id = %(worker_id)s AND attempt = %(attempt)s
      AND status = 'claimed'
    RETURNING run_id, available_at
), pending AS (
    INSERT INTO {schema}.steps (run_id, position, name, kind, status, attempts, started_at)
    SELECT h.run_id, t.position, t.name, 'step', 'pending', 0, {now}
    FROM todo t, held h
    ON CONFLICT (run_id, position) DO NOTHING
), spawned AS (
    INSERT INTO {schema}.tasks (run_id, kind, step_position, step_name, gather_start, queue,
                                workflow, version, priority, partition_key, status, available_at,
                                created_at)
    SELECT h.run_id, 'step', t.position, t.name, %(gather_start)s, h.queue, h.workflow,
           h.version, h.priority, h.partition_key, 'ready', {now}, {now}
    FROM todo t, held h
    RETURNING id
), waiting AS (
    UPDATE {schema}.runs r
    SET status = 'waiting', updated_at = {now}, waiting_for = %(waiting_for)s::jsonb
    FROM lease
    WHERE r.id = lease.run_id AND r.status = 'running'
), event AS (
    INSERT INTO {schema}.history (run_id, at, event, attempt, worker_id, detail)
    SELECT run_id, {now}, 'steps_scheduled', %(attempt)s, %(worker_id)s,
           jsonb_build_object('steps', (SELECT jsonb_agg(name ORDER BY position) FROM todo))
    FROM lease WHERE EXISTS (SELECT 1 FROM todo)
)
SELECT (SELECT count(*) FROM lease) AS leased, (SELECT count(*) FROM spawned) AS spawned;

-- name: step_complete_parallel
-- Finish a parallel step's task: its final checkpoint (completed or failed)
-- and the deletion of its task in one statement, fenced. The run's own task,
-- parked at the gather, becomes due when no other parallel step of the run
-- remains, or at once when %(wake)s (a failure under fail-fast). SKIP LOCKED:
-- a run task being claimed this instant reads the checkpoints after this
-- commit anyway.
WITH lease AS (
    DELETE FROM {schema}.tasks
    WHERE id = %(task_id)s AND worker_id = %(worker_id)s AND attempt = %(attempt)s
      AND status = 'claimed'
    RETURNING run_id
), checkpoint AS (
    INSERT INTO {schema}.steps (run_id, position, name, kind, status, attempts, output, error,
                                worker_id, started_at, completed_at)
    SELECT run_id, %(position)s, %(name)s, %(kind)s, %(status)s, %(attempts)s, %(output)s::jsonb,
           %(error)s::jsonb, %(worker_id)s, %(started_at)s,
           coalesce(%(now)s::timestamptz, clock_timestamp())
    FROM lease
    ON CONFLICT (run_id, position) DO UPDATE
    SET status = EXCLUDED.status, attempts = EXCLUDED.attempts, output = EXCLUDED.output,
        error = EXCLUDED.error, worker_id = EXCLUDED.worker_id,
        started_at = EXCLUDED.started_at, completed_at = EXCLUDED.completed_at, wake_at = NULL
    WHERE {schema}.steps.status IN ('pending', 'retrying', 'waiting')
      AND {schema}.steps.name = EXCLUDED.name
    RETURNING run_id
), parent AS (
    UPDATE {schema}.tasks SET available_at = {now}
    WHERE id IN (SELECT t.id FROM {schema}.tasks t JOIN lease ON t.run_id = lease.run_id
                 WHERE t.kind = 'run' AND t.status = 'ready'
                   AND (%(wake)s OR NOT EXISTS (
                        SELECT 1 FROM {schema}.tasks o
                        WHERE o.run_id = lease.run_id AND o.kind = 'step'
                          AND o.id <> %(task_id)s))
                 FOR UPDATE OF t SKIP LOCKED)
), event AS (
    INSERT INTO {schema}.history (run_id, at, event, step_position, step_name, attempt, worker_id,
                                  detail, duration)
    SELECT run_id, {now}, %(event)s, %(position)s, %(name)s, %(attempts)s, %(worker_id)s,
           %(error)s::jsonb,
           coalesce(%(now)s::timestamptz, clock_timestamp()) - %(started_at)s::timestamptz
    FROM checkpoint
)
SELECT (SELECT count(*) FROM lease) AS leased, (SELECT count(*) FROM checkpoint) AS written,
       (SELECT r.status FROM {schema}.runs r JOIN lease ON r.id = lease.run_id) AS run_status;

-- name: task_finish
-- Delete a held task whose work is done (a graph's first task once it has
-- scheduled the graph's first steps). Fenced.
DELETE FROM {schema}.tasks
WHERE id = %(task_id)s AND worker_id = %(worker_id)s AND attempt = %(attempt)s
  AND status = 'claimed'
RETURNING run_id;

-- name: step_schedule
-- Make graph steps (or their compensations) claimable: a 'pending' row and a
-- task for each position at %(positions)s that has neither a final row nor a
-- task. The tasks take the run's queue, workflow and version.
WITH branches AS (
    SELECT b.position, b.name, b.kind
    FROM unnest(%(positions)s::integer[], %(names)s::text[], %(kinds)s::text[])
         AS b(position, name, kind)
), run AS (
    SELECT id, queue, workflow, version, priority, partition_key
    FROM {schema}.runs WHERE id = %(run_id)s
), todo AS (
    SELECT b.* FROM branches b
    WHERE NOT EXISTS (SELECT 1 FROM {schema}.tasks t
                      WHERE t.run_id = %(run_id)s AND t.kind = 'step'
                        AND t.step_position = b.position)
      AND NOT EXISTS (SELECT 1 FROM {schema}.steps s
                      WHERE s.run_id = %(run_id)s AND s.position = b.position
                        AND s.status NOT IN ('pending', 'retrying', 'waiting'))
), pending AS (
    INSERT INTO {schema}.steps (run_id, position, name, kind, status, attempts, started_at)
    SELECT %(run_id)s, position, name, kind, 'pending', 0, {now} FROM todo
    ON CONFLICT (run_id, position) DO NOTHING
), spawned AS (
    INSERT INTO {schema}.tasks (run_id, kind, step_position, step_name, queue, workflow, version,
                                priority, partition_key, status, available_at, created_at)
    SELECT run.id, 'step', t.position, t.name, run.queue, run.workflow, run.version,
           run.priority, run.partition_key, 'ready', {now}, {now}
    FROM todo t, run
    RETURNING step_name
), event AS (
    INSERT INTO {schema}.history (run_id, at, event, detail)
    SELECT %(run_id)s, {now}, 'steps_scheduled',
           jsonb_build_object('steps', (SELECT jsonb_agg(name ORDER BY position) FROM todo))
    WHERE EXISTS (SELECT 1 FROM todo)
)
SELECT count(*) AS spawned FROM spawned;

-- name: step_record
-- Record a final step row that no worker executed: a graph step skipped by
-- its condition or by a skipped dependency, or failed because its condition
-- raised. Never overwrites a final row.
WITH recorded AS (
    INSERT INTO {schema}.steps (run_id, position, name, kind, status, attempts, output, error,
                                started_at, completed_at)
    VALUES (%(run_id)s, %(position)s, %(name)s, %(kind)s, %(status)s, 0, %(output)s::jsonb,
            %(error)s::jsonb, {now}, {now})
    ON CONFLICT (run_id, position) DO UPDATE
    SET status = EXCLUDED.status, output = EXCLUDED.output, error = EXCLUDED.error,
        completed_at = EXCLUDED.completed_at
    WHERE {schema}.steps.status IN ('pending', 'retrying', 'waiting')
    RETURNING run_id
)
INSERT INTO {schema}.history (run_id, at, event, step_position, step_name, detail)
SELECT run_id, {now}, 'step_' || %(status)s, %(position)s, %(name)s, %(error)s::jsonb
FROM recorded;

-- name: run_halt_steps
-- A graph step failed for good: graph steps not started yet (their task is
-- queued, parked at a gate or paused) are cancelled; those being executed
-- finish. Returns how many are still being executed, apart from the task
-- %(task_id)s of the caller.
WITH dropped AS (
    DELETE FROM {schema}.tasks
    WHERE id IN (SELECT id FROM {schema}.tasks
                 WHERE run_id = %(run_id)s AND kind = 'step' AND status <> 'claimed'
                 FOR UPDATE SKIP LOCKED)
    RETURNING step_position
), cancelled AS (
    UPDATE {schema}.steps s SET status = 'cancelled', completed_at = {now}
    FROM dropped
    WHERE s.run_id = %(run_id)s AND s.position = dropped.step_position
      AND s.status IN ('pending', 'retrying', 'waiting')
)
SELECT count(*) AS running FROM {schema}.tasks
WHERE run_id = %(run_id)s AND kind = 'step' AND status = 'claimed' AND id <> %(task_id)s;

-- name: run_mark_compensating
-- Mark a graph run as compensating (its error kept) unless it already is.
WITH marked AS (
    UPDATE {schema}.runs
    SET status = 'compensating', error = %(error)s::jsonb, waiting_for = NULL, updated_at = {now}
    WHERE id = %(run_id)s AND status IN ('queued', 'running', 'waiting', 'paused')
    RETURNING id
)
INSERT INTO {schema}.history (run_id, at, event, detail)
SELECT id, {now}, 'run_compensating', %(error)s::jsonb FROM marked;

-- name: run_progress
-- A graph run moves again after a step finished: 'running', with nothing to
-- wait for, unless it is compensating or finished.
UPDATE {schema}.runs SET status = 'running', waiting_for = NULL, updated_at = {now}
WHERE id = %(run_id)s AND status IN ('queued', 'waiting');

-- name: run_finish
-- End a graph run: status %(status)s with its output or error, every task
-- not being executed dropped (one being executed deletes itself when done).
WITH finished AS (
    UPDATE {schema}.runs
    SET status = %(status)s, output = %(output)s::jsonb,
        error = coalesce(%(error)s::jsonb, error), waiting_for = NULL,
        completed_at = {now}, updated_at = {now}
    WHERE id = %(run_id)s
      AND status NOT IN ('completed', 'failed', 'cancelled', 'compensated', 'compensation_failed')
    RETURNING id, completed_at - started_at AS took
), leftovers AS (
    DELETE FROM {schema}.tasks
    WHERE id IN (SELECT t.id FROM {schema}.tasks t JOIN finished f ON t.run_id = f.id
                 WHERE t.status <> 'claimed' FOR UPDATE OF t SKIP LOCKED)
), event AS (
    INSERT INTO {schema}.history (run_id, at, event, detail, duration)
    SELECT id, {now}, 'run_' || %(status)s, %(error)s::jsonb, took FROM finished
)
SELECT count(*) AS changed FROM finished;

-- name: step_gate_park
-- Park a graph step at its approval gate until signal %(signal)s arrives (or
-- its timeout, at %(seconds)s from the first park): the step row 'waiting'
-- with its wake time, the task handed back due then, the run 'waiting'. Fenced.
WITH lease AS (
    UPDATE {schema}.tasks t
    SET status = 'ready', worker_id = NULL, lease_expires_at = NULL, claimed_at = NULL,
        wait_signal = %(signal)s,
        available_at = coalesce(
            (SELECT s.wake_at FROM {schema}.steps s
             WHERE s.run_id = t.run_id AND s.position = %(position)s AND s.status = 'waiting'),
            {now} + make_interval(secs => %(seconds)s))
    WHERE id = %(task_id)s AND worker_id = %(worker_id)s AND attempt = %(attempt)s
      AND status = 'claimed'
    RETURNING run_id, available_at
), waiting_step AS (
    UPDATE {schema}.steps s SET status = 'waiting', wake_at = lease.available_at
    FROM lease
    WHERE s.run_id = lease.run_id AND s.position = %(position)s AND s.status = 'pending'
), waiting_run AS (
    UPDATE {schema}.runs r
    SET status = 'waiting', updated_at = {now},
        waiting_for = jsonb_build_object('signal', %(signal)s::text, 'step', %(name)s::text,
                                         'until', lease.available_at)
    FROM lease
    WHERE r.id = lease.run_id AND r.status IN ('queued', 'running')
), event AS (
    INSERT INTO {schema}.history (run_id, at, event, step_position, step_name, attempt, worker_id,
                                  detail)
    SELECT run_id, {now}, 'run_waiting', %(position)s, %(name)s, %(attempt)s, %(worker_id)s,
           jsonb_build_object('signal', %(signal)s::text, 'until', available_at)
    FROM lease
)
SELECT count(*) AS leased, max(available_at) AS wake_at FROM lease;

-- name: signal_take_gate
-- The signal that opens a graph step's gate: the one already consumed for
-- this step (a retry after a crash), else the oldest pending one named
-- %(signal)s, consumed now. Run inside the transaction that took run_lock.
WITH taken_before AS (
    SELECT payload FROM {schema}.signals
    WHERE run_id = %(run_id)s AND consumed_position = %(position)s
    ORDER BY id LIMIT 1
), taken AS (
    UPDATE {schema}.signals s
    SET consumed_at = {now}, consumed_position = %(position)s
    WHERE NOT EXISTS (SELECT 1 FROM taken_before)
      AND s.id = (SELECT p.id FROM {schema}.signals p
                  WHERE p.run_id = %(run_id)s AND p.name = %(signal)s AND p.consumed_at IS NULL
                  ORDER BY p.id LIMIT 1)
    RETURNING s.id, s.payload
), event AS (
    INSERT INTO {schema}.history (run_id, at, event, step_position, step_name, detail)
    SELECT %(run_id)s, {now}, 'signal_consumed', %(position)s, %(name)s,
           jsonb_build_object('signal_id', id)
    FROM taken
)
SELECT EXISTS (SELECT 1 FROM taken_before UNION ALL SELECT 1 FROM taken) AS found,
       coalesce((SELECT payload FROM taken_before), (SELECT payload FROM taken)) AS payload,
       {now} AS db_now;

-- name: run_child_status
-- Lock a child run's row (shared) and read its outcome: a parent about to
-- wait for it either sees it finished, or parks before the child's final
-- update, whose trigger then wakes the parent.
SELECT status, output, error FROM {schema}.runs WHERE id = %(run_id)s FOR SHARE;
