-- Named queries on step checkpoints, step tasks (ctx.gather, ctx.map)
-- and graph steps. A step task is a 'pending' step row plus a task of kind
-- 'step'. Statements that decide what runs next are executed in a transaction
-- that first took run_lock: completions of one run's steps serialise there.

-- name: step_list
-- The checkpoints of one run, in position order: what replay reads.
SELECT position, name, kind, status, attempts, output, error, worker_id, started_at, completed_at,
       wake_at
FROM {schema}.steps
WHERE run_id = %(run_id)s
ORDER BY position;

-- name: step_list_at
-- The checkpoints of one run at %(positions)s, in position order: what a
-- batch of graph steps reads (their own rows and their dependencies').
SELECT position, name, kind, status, attempts, output, error, worker_id, started_at, completed_at,
       wake_at
FROM {schema}.steps
WHERE run_id = %(run_id)s AND position = ANY(%(positions)s::integer[])
ORDER BY position;

-- name: step_list_claimed_now
-- The checkpoints of the tasks this worker claimed in this very transaction
-- (claimed_at is the transaction's time), sent in the same pipeline right
-- after task_claim: one round trip claims and reads. As a later statement of
-- the transaction it has a fresh snapshot, so it sees every checkpoint
-- committed before the claim (see task_claim). A gather's step task
-- gets those before its gather and its own.
SELECT t.id AS task_id, s.position, s.name, s.kind, s.status, s.attempts, s.output, s.error,
       s.worker_id, s.started_at, s.completed_at, s.wake_at
FROM {schema}.tasks t
JOIN {schema}.steps s ON s.run_id = t.run_id
WHERE t.worker_id = %(worker_id)s AND t.status = 'claimed' AND t.claimed_at = {now}
  AND (t.kind = 'run' OR t.gather_start IS NULL OR s.position < t.gather_start
       OR s.position = t.step_position)
ORDER BY t.id, s.position;

-- name: step_checkpoint
-- Record steps' outcomes (completed, failed permanently, or a failed attempt
-- that will be retried) and extend their tasks' leases, in one statement: one
-- input row per checkpoint, each of its own run, fenced on its own task (a
-- single checkpoint is a batch of one; the worker's group commit sends the
-- checkpoints of many runs). A row whose fence fails writes nothing and is
-- reported as not leased, without touching the others: the caller gets
-- LeaseLost. Updating the task row also takes its row lock, so the reaper
-- cannot reap the task between the fence check and the commit. The input
-- is in task id order and task rows are locked in that order, as every other
-- writer of several tasks does. A 'retrying' row may be replaced by a later
-- attempt (and a step task's 'pending' row by its first); a final row
-- never is. The checkpoints come as typed arrays, one per column (unnest
-- zips them into rows): one parameter per column however many rows there
-- are. The answer has one row per input, in order.
WITH input AS (
    SELECT * FROM unnest(%(task_ids)s::bigint[], %(worker_ids)s::text[], %(attempts)s::integer[],
                         %(lease_seconds)s::float8[], %(positions)s::integer[],
                         %(names)s::text[], %(kinds)s::text[], %(statuses)s::text[],
                         %(step_attempts)s::integer[], %(outputs)s::jsonb[],
                         %(errors)s::jsonb[], %(started)s::timestamptz[],
                         %(event_keys)s::text[], %(stream_seqs)s::integer[],
                         %(stream_closed)s::boolean[])
        WITH ORDINALITY AS i(task_id, worker_id, attempt, lease_seconds, position, name, kind,
                             status, step_attempts, output, error, started_at, event_key,
                             stream_seq, stream_closed, n)
), lease AS (
    UPDATE {schema}.tasks t
    SET lease_expires_at = {now} + make_interval(secs => i.lease_seconds)
    FROM input i
    WHERE t.id = i.task_id AND t.worker_id = i.worker_id AND t.attempt = i.attempt
      AND t.status = 'claimed'
    RETURNING t.id AS task_id, t.run_id
), checkpoint AS (
    INSERT INTO {schema}.steps (run_id, position, name, kind, status, attempts, output, error,
                                worker_id, started_at, completed_at)
    SELECT l.run_id, i.position, i.name, i.kind, i.status, i.step_attempts, i.output, i.error,
           i.worker_id, i.started_at,
           -- clock_timestamp(), not now(): in a ctx.transaction step the
           -- transaction began before the user's SQL ran, and the step's
           -- duration must include that work.
           CASE WHEN i.status = 'retrying' THEN NULL
                ELSE coalesce(%(now)s::timestamptz, clock_timestamp()) END
    FROM input i JOIN lease l ON l.task_id = i.task_id
    ORDER BY i.n
    ON CONFLICT (run_id, position) DO UPDATE
    SET status = EXCLUDED.status, attempts = EXCLUDED.attempts, output = EXCLUDED.output,
        error = EXCLUDED.error, worker_id = EXCLUDED.worker_id,
        started_at = EXCLUDED.started_at, completed_at = EXCLUDED.completed_at
    WHERE {schema}.steps.status IN ('pending', 'retrying', 'waiting')
      AND {schema}.steps.name = EXCLUDED.name
    RETURNING run_id, position, name, kind, status, attempts, error, worker_id, started_at
), event AS (
    -- The entry's duration is the attempt's: from its start to this checkpoint.
    -- From the written rows themselves: a join of the CTEs would be planned as
    -- nested loops, quadratic in the batch.
    INSERT INTO {schema}.history (run_id, at, event, step_position, step_name, attempt, worker_id,
                                  detail, duration)
    -- The event of each status (perdure.store.writes.CHECKPOINT_EVENTS).
    SELECT run_id, {now},
           CASE status WHEN 'completed' THEN 'step_completed' WHEN 'failed' THEN 'step_failed'
                       WHEN 'retrying' THEN 'step_retry_scheduled'
                       WHEN 'timed_out' THEN CASE kind WHEN 'event_wait' THEN 'event_wait_timed_out'
                                                       ELSE 'signal_timed_out' END END,
           position, name, attempts, worker_id, error,
           coalesce(%(now)s::timestamptz, clock_timestamp()) - started_at
    FROM checkpoint
), published_input AS (
    -- The rows that publish (rare: filtered before they meet the written rows,
    -- through a membership test).
    SELECT l.run_id, i.kind, i.event_key, i.stream_seq, i.stream_closed, i.output, i.position
    FROM input i JOIN lease l ON l.task_id = i.task_id
    WHERE i.kind IN ('event', 'stream')
      AND (l.run_id, i.position) IN (SELECT run_id, position FROM checkpoint)
), published AS (
    -- ctx.set_event and ctx.write_stream publish in the checkpoint's statement,
    -- so a replay never publishes twice.
    INSERT INTO {schema}.events (run_id, key, value, position, updated_at)
    SELECT run_id, event_key, output, position, {now}
    FROM published_input WHERE kind = 'event'
    ON CONFLICT (run_id, key) DO UPDATE
    SET value = EXCLUDED.value, position = EXCLUDED.position, updated_at = EXCLUDED.updated_at
), streamed AS (
    INSERT INTO {schema}.streams (run_id, key, seq, value, closed, created_at)
    SELECT run_id, event_key, stream_seq, output, stream_closed, {now}
    FROM published_input WHERE kind = 'stream'
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

-- name: step_wait
-- Park the run at a durable wait (a sleep or a signal): the wait's
-- checkpoint in status 'waiting' with its wake time, the task handed back due
-- at that time, the run 'waiting' with what it waits for. Fenced. The wake
-- time is %(wake_at)s, or now + %(seconds)s when that is NULL. A task that
-- waits for a signal records its name, for send_signal to wake it.
WITH lease AS (
    UPDATE {schema}.tasks
    SET status = 'ready', worker_id = NULL, lease_expires_at = NULL, claimed_at = NULL,
        available_at = coalesce(%(wake_at)s::timestamptz,
                                {now} + make_interval(secs => %(seconds)s)),
        wait_signal = %(wait_signal)s
    WHERE id = %(task_id)s AND worker_id = %(worker_id)s AND attempt = %(attempt)s
      AND status = 'claimed'
    RETURNING run_id, available_at
), checkpoint AS (
    INSERT INTO {schema}.steps (run_id, position, name, kind, status, attempts, worker_id,
                                started_at, wake_at)
    SELECT run_id, %(position)s, %(name)s, %(kind)s, 'waiting', 1, %(worker_id)s, {now},
           available_at
    FROM lease
    ON CONFLICT (run_id, position) DO NOTHING
), waiting AS (
    UPDATE {schema}.runs r
    SET status = 'waiting', updated_at = {now},
        waiting_for = %(waiting_for)s::jsonb || jsonb_build_object('until', lease.available_at)
    FROM lease
    WHERE r.id = lease.run_id AND r.status = 'running'
), event AS (
    INSERT INTO {schema}.history (run_id, at, event, step_position, step_name, attempt, worker_id,
                                  detail)
    SELECT run_id, {now}, 'run_waiting', %(position)s, %(name)s, %(attempt)s, %(worker_id)s,
           %(waiting_for)s::jsonb || jsonb_build_object('until', available_at)
    FROM lease
)
SELECT count(*) AS leased, max(available_at) AS wake_at FROM lease;

-- name: step_fanout
-- Park a function workflow at a gather: the steps at %(positions)s
-- that have neither a final checkpoint nor a task get a 'pending' row and a
-- task any worker can claim; the run's own task waits for them without
-- holding a slot (it is due now if nothing is left to wait for). Fenced.
-- With %(park)s false the step tasks are spawned but the run's task
-- stays claimed (its lease extended): its worker runs them itself first
-- (step_task_claim) and parks afterwards. The tasks are due after
-- %(head_start)s seconds: other workers join in after that head start.
WITH gather_steps AS (
    SELECT b.position, b.name
    FROM unnest(%(positions)s::integer[], %(names)s::text[]) AS b(position, name)
), held AS (
    SELECT run_id, queue, workflow, version, priority, partition_key
    FROM {schema}.tasks
    WHERE id = %(task_id)s AND worker_id = %(worker_id)s AND attempt = %(attempt)s
      AND status = 'claimed'
), todo AS (
    SELECT b.position, b.name FROM gather_steps b, held h
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
      AND status = 'claimed' AND %(park)s
    RETURNING run_id, available_at
), kept AS (
    -- Not parking: the run's task stays claimed, its lease extended.
    UPDATE {schema}.tasks
    SET lease_expires_at = {now} + make_interval(secs => %(lease_seconds)s)
    WHERE id = %(task_id)s AND worker_id = %(worker_id)s AND attempt = %(attempt)s
      AND status = 'claimed' AND NOT %(park)s
    RETURNING run_id
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
           h.version, h.priority, h.partition_key, 'ready',
           {now} + make_interval(secs => %(head_start)s), {now}
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
    FROM held WHERE EXISTS (SELECT 1 FROM todo)
)
SELECT (SELECT count(*) FROM lease) + (SELECT count(*) FROM kept) AS leased,
       (SELECT count(*) FROM spawned) AS spawned;

-- name: step_task_finish
-- Finish a step task: its final checkpoint (completed or failed)
-- and the deletion of its task in one statement, fenced. The run's own task,
-- parked at the gather, becomes due when no other step task of the run
-- remains, or at once when %(wake)s (a failure under fail-fast); a run that
-- has moved on (its gather failed fast, it now waits for something else) is
-- left waiting for that. SKIP LOCKED:
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
                   AND EXISTS (SELECT 1 FROM {schema}.runs r
                               WHERE r.id = t.run_id AND r.waiting_for -> 'steps' IS NOT NULL)
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

-- name: step_task_claim
-- Claim up to %(limit)s ready step tasks of one gather (the run's tasks of
-- kind 'step' at %(gather_start)s; NULL: a graph's steps), at positions from
-- %(after)s to before %(before)s, for the worker that reached the gather (or
-- scheduled the graph steps) and executes them itself, without replaying the
-- workflow for each. Only
-- steps never tried ('pending') of a run still waiting or running: a retry,
-- a duplicate of a final step, a step due later are left to the claim loop.
-- A task never claimed (attempt 0) is taken before it is due: its head
-- start (see step_fanout) is for this worker. Only positions from %(after)s
-- on: the worker moves on past the steps it claimed, so that the index scan
-- does not walk over the tasks its earlier batches deleted. Other workers claim the rest as usual: SKIP
-- LOCKED, in position order. Each row: the task's fence, its step and the
-- attempts the step already made.
WITH picked AS (
    SELECT t.id
    FROM {schema}.tasks t
    WHERE t.run_id = %(run_id)s AND t.kind = 'step'
      AND t.gather_start IS NOT DISTINCT FROM %(gather_start)s::integer
      AND t.step_position >= %(after)s AND t.step_position < %(before)s
      AND t.status = 'ready' AND (t.available_at <= {now} OR t.attempt = 0)
      AND EXISTS (SELECT 1 FROM {schema}.steps s
                  WHERE s.run_id = t.run_id AND s.position = t.step_position
                    AND s.status = 'pending')
      AND EXISTS (SELECT 1 FROM {schema}.runs r
                  WHERE r.id = %(run_id)s AND r.status IN ('waiting', 'running'))
    ORDER BY t.step_position
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), claimed AS (
    UPDATE {schema}.tasks t
    SET status = 'claimed', worker_id = %(worker_id)s, attempt = t.attempt + 1,
        claimed_at = {now}, lease_expires_at = {now} + make_interval(secs => %(lease_seconds)s),
        wait_signal = NULL
    FROM picked
    WHERE t.id = picked.id
    RETURNING t.id AS task_id, t.run_id, t.worker_id, t.attempt, t.step_position, t.step_name,
              (SELECT s.attempts FROM {schema}.steps s
               WHERE s.run_id = t.run_id AND s.position = t.step_position
                 AND s.status IN ('pending', 'retrying')) AS step_attempts
), event AS (
    INSERT INTO {schema}.history (run_id, at, event, step_position, step_name, attempt, worker_id)
    SELECT run_id, {now}, 'step_claimed', step_position, step_name, attempt, %(worker_id)s
    FROM claimed
)
SELECT * FROM claimed;

-- name: step_task_complete
-- step_task_finish for many completed step tasks of one run, in one
-- statement: each step's final checkpoint and the deletion of its task, each
-- fenced on its own task (a step whose lease was lost is not written); the
-- run's task, if still parked at a gather, becomes due when no other parallel
-- step remains. Executed after
-- run_lock in the same transaction, like step_task_finish.
WITH done AS (
    SELECT *
    FROM unnest(%(task_ids)s::bigint[], %(fence_attempts)s::integer[],
                %(positions)s::integer[], %(names)s::text[], %(attempts)s::integer[],
                %(outputs)s::text[], %(started)s::timestamptz[])
         AS d(task_id, fence_attempt, position, name, attempts, output, started_at)
), lease AS (
    DELETE FROM {schema}.tasks t
    USING done d
    WHERE t.id = d.task_id AND t.worker_id = %(worker_id)s AND t.attempt = d.fence_attempt
      AND t.status = 'claimed' AND t.run_id = %(run_id)s
    RETURNING t.id, t.run_id, d.position, d.name, d.attempts, d.output, d.started_at
), checkpoint AS (
    INSERT INTO {schema}.steps (run_id, position, name, kind, status, attempts, output, error,
                                worker_id, started_at, completed_at)
    SELECT run_id, position, name, 'step', 'completed', attempts, output::jsonb, NULL,
           %(worker_id)s, started_at, clock_timestamp()
    FROM lease
    ON CONFLICT (run_id, position) DO UPDATE
    SET status = EXCLUDED.status, attempts = EXCLUDED.attempts, output = EXCLUDED.output,
        error = EXCLUDED.error, worker_id = EXCLUDED.worker_id,
        started_at = EXCLUDED.started_at, completed_at = EXCLUDED.completed_at, wake_at = NULL
    WHERE {schema}.steps.status IN ('pending', 'retrying', 'waiting')
      AND {schema}.steps.name = EXCLUDED.name
    RETURNING run_id, position, name, attempts, started_at, completed_at
), parent AS (
    UPDATE {schema}.tasks SET available_at = {now}
    WHERE id IN (SELECT t.id FROM {schema}.tasks t
                 WHERE t.run_id = %(run_id)s AND t.kind = 'run' AND t.status = 'ready'
                   AND EXISTS (SELECT 1 FROM lease)
                   AND EXISTS (SELECT 1 FROM {schema}.runs r
                               WHERE r.id = t.run_id AND r.waiting_for -> 'steps' IS NOT NULL)
                   AND NOT EXISTS (
                        SELECT 1 FROM {schema}.tasks o
                        WHERE o.run_id = %(run_id)s AND o.kind = 'step'
                          AND o.id NOT IN (SELECT id FROM lease))
                 FOR UPDATE OF t SKIP LOCKED)
), event AS (
    INSERT INTO {schema}.history (run_id, at, event, step_position, step_name, attempt, worker_id,
                                  duration)
    SELECT run_id, {now}, 'step_completed', position, name, attempts, %(worker_id)s,
           completed_at - started_at
    FROM checkpoint
)
SELECT (SELECT count(*) FROM lease) AS leased, (SELECT count(*) FROM checkpoint) AS written,
       (SELECT r.status FROM {schema}.runs r WHERE r.id = %(run_id)s) AS run_status;

-- name: step_schedule
-- Make graph steps (or their compensations) claimable: a 'pending' row and a
-- task for each position at %(positions)s that has neither a final row nor a
-- task. The tasks take the run's queue, workflow and version, and are due
-- after %(head_start)s seconds: the worker that scheduled them claims them
-- before that (step_task_claim), other workers join in after.
WITH gather_steps AS (
    SELECT b.position, b.name, b.kind
    FROM unnest(%(positions)s::integer[], %(names)s::text[], %(kinds)s::text[])
         AS b(position, name, kind)
), run AS (
    SELECT id, queue, workflow, version, priority, partition_key
    FROM {schema}.runs WHERE id = %(run_id)s
), todo AS (
    SELECT b.* FROM gather_steps b
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
           run.priority, run.partition_key, 'ready',
           {now} + make_interval(secs => %(head_start)s), {now}
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

-- name: step_list_archived
-- The checkpoints of an archived run, in position order.
SELECT position, name, kind, status, attempts, output, error, worker_id, started_at, completed_at,
       wake_at
FROM {schema}.archive_steps
WHERE run_id = %(run_id)s
ORDER BY position;

-- name: step_release
-- Let every worker claim a run's step tasks now that still wait out the
-- head start of the worker that scheduled them (a 'pending' step, never
-- attempted): that worker has too few slots to reach them soon. The tasks'
-- trigger notifies the queue's workers. Steps waiting for a retry or a
-- snooze keep their time.
UPDATE {schema}.tasks t SET available_at = {now}
FROM {schema}.steps s
WHERE t.run_id = %(run_id)s AND t.kind = 'step' AND t.status = 'ready'
  AND t.available_at > {now}
  AND s.run_id = t.run_id AND s.position = t.step_position
  AND s.status = 'pending' AND s.attempts = 0;
