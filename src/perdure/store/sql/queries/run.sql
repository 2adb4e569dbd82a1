-- Named queries on runs. {schema} is the quoted schema name and {now} the
-- clock: coalesce(%(now)s, now()), so a test clock can stand in for the server's.

-- name: run_insert
-- Start a run: the run row, its first task and its history entry in one
-- statement. ON CONFLICT makes a repeated key return the existing run; the
-- second SELECT finds it. Under a concurrent insert of the same key, this
-- statement's snapshot may predate the winner's commit and return no row: the
-- caller then runs it again, and the fresh snapshot sees the winner.
WITH inserted AS (
    INSERT INTO {schema}.runs (id, workflow, version, queue, key, status, input, parent_run_id,
                               created_at, updated_at, deadline_at)
    VALUES (%(run_id)s, %(workflow)s, %(version)s, %(queue)s, %(key)s, 'queued', %(input)s::jsonb,
            %(parent_run_id)s, {now}, {now},
            {now} + make_interval(secs => %(timeout_seconds)s::float8))
    ON CONFLICT (key) DO NOTHING
    RETURNING id, workflow, status, created_at
), task AS (
    INSERT INTO {schema}.tasks (run_id, kind, queue, workflow, version, priority, status,
                                available_at, created_at)
    SELECT id, 'run', %(queue)s, %(workflow)s, %(version)s, %(priority)s, 'ready',
           {now} + make_interval(secs => %(delay_seconds)s), {now}
    FROM inserted
), event AS (
    INSERT INTO {schema}.history (run_id, at, event, detail)
    SELECT id, {now}, 'run_created', jsonb_build_object('workflow', %(workflow)s, 'version', %(version)s,
                                                       'queue', %(queue)s, 'key', %(key)s)
    FROM inserted
)
SELECT id, workflow, status, created_at, true AS created FROM inserted
UNION ALL
SELECT id, workflow, status, created_at, false AS created
FROM {schema}.runs
WHERE key = %(key)s AND NOT EXISTS (SELECT 1 FROM inserted);

-- name: run_get
-- One run by id.
SELECT * FROM {schema}.runs WHERE id = %(run_id)s;

-- name: run_get_by_key
-- One run by its caller-given key.
SELECT * FROM {schema}.runs WHERE key = %(key)s;

-- name: run_status
-- The fields a waiting caller polls: status, output and error of one run.
SELECT status, output, error FROM {schema}.runs WHERE id = %(run_id)s;

-- name: run_list
-- Runs newest first, filtered; each filter is skipped when its parameter is
-- NULL. A parent's children are found through runs_parent_run_id_idx. The (status, created_at) and (workflow, created_at) indexes serve the
-- filtered forms, created_at DESC the unfiltered one.
SELECT r.*,
       (SELECT count(*) FROM {schema}.steps s WHERE s.run_id = r.id AND s.status = 'completed')
           AS steps_completed
FROM {schema}.runs r
WHERE (%(status)s::text IS NULL OR r.status = %(status)s)
  AND (%(workflow)s::text IS NULL OR r.workflow = %(workflow)s)
  AND (%(since)s::timestamptz IS NULL OR r.created_at >= %(since)s)
  AND (%(before)s::timestamptz IS NULL OR r.created_at < %(before)s)
  AND (%(parent)s::uuid IS NULL OR r.parent_run_id = %(parent)s::uuid)
ORDER BY r.created_at DESC, r.id DESC
LIMIT %(limit)s;

-- name: run_complete
-- Finish a run with its output. Fenced: the task row must still be held by
-- this worker at this attempt, else nothing changes and the caller gets
-- LeaseLost. Deleting the task, setting the run's output and the history entry
-- commit together. Parallel steps still queued (a gather that failed fast) are
-- dropped; one being executed finishes, and its checkpoint deletes its task.
WITH lease AS (
    DELETE FROM {schema}.tasks
    WHERE id = %(task_id)s AND worker_id = %(worker_id)s AND attempt = %(attempt)s
      AND status = 'claimed'
    RETURNING run_id
), finished AS (
    UPDATE {schema}.runs r
    SET status = 'completed', output = %(output)s::jsonb, error = NULL, waiting_for = NULL,
        completed_at = {now}, updated_at = {now}
    FROM lease
    -- A run cancelled while its last step ran stays cancelled.
    WHERE r.id = lease.run_id AND r.status IN ('running', 'paused')
    RETURNING r.id
), leftovers AS (
    DELETE FROM {schema}.tasks
    WHERE id IN (SELECT t.id FROM {schema}.tasks t JOIN lease ON t.run_id = lease.run_id
                 WHERE t.id <> %(task_id)s AND t.status <> 'claimed'
                 FOR UPDATE OF t SKIP LOCKED)
), event AS (
    INSERT INTO {schema}.history (run_id, at, event, attempt, worker_id)
    SELECT id, {now}, 'run_completed', %(attempt)s, %(worker_id)s FROM finished
)
SELECT (SELECT count(*) FROM lease) AS leased, (SELECT count(*) FROM finished) AS changed;

-- name: run_fail
-- End a run that failed for good: status %(status)s ('failed', or after its
-- compensations 'compensated' / 'compensation_failed') with its error and
-- traceback (merged into the error already recorded, if any: compensations
-- add what failed to the original failure), task deleted, history written.
-- Fenced like run_complete.
WITH lease AS (
    DELETE FROM {schema}.tasks
    WHERE id = %(task_id)s AND worker_id = %(worker_id)s AND attempt = %(attempt)s
      AND status = 'claimed'
    RETURNING run_id
), failed AS (
    UPDATE {schema}.runs r
    SET status = %(status)s,
        error = coalesce(r.error, '{}'::jsonb) || coalesce(%(error)s::jsonb, '{}'::jsonb),
        waiting_for = NULL,
        completed_at = {now}, updated_at = {now}
    FROM lease
    WHERE r.id = lease.run_id AND r.status IN ('running', 'paused', 'compensating')
    RETURNING r.id
), leftovers AS (
    DELETE FROM {schema}.tasks
    WHERE id IN (SELECT t.id FROM {schema}.tasks t JOIN lease ON t.run_id = lease.run_id
                 WHERE t.id <> %(task_id)s AND t.status <> 'claimed'
                 FOR UPDATE OF t SKIP LOCKED)
), event AS (
    INSERT INTO {schema}.history (run_id, at, event, attempt, worker_id, detail)
    SELECT id, {now}, 'run_' || %(status)s, %(attempt)s, %(worker_id)s, %(error)s::jsonb
    FROM failed
)
SELECT (SELECT count(*) FROM lease) AS leased, (SELECT count(*) FROM failed) AS changed;

-- name: run_compensating
-- A run whose work failed for good starts its compensations: status
-- 'compensating', the error kept. Fenced; a no-op if already compensating.
WITH lease AS (
    SELECT run_id FROM {schema}.tasks
    WHERE id = %(task_id)s AND worker_id = %(worker_id)s AND attempt = %(attempt)s
      AND status = 'claimed'
), marked AS (
    UPDATE {schema}.runs r
    SET status = 'compensating', error = %(error)s::jsonb, updated_at = {now}
    FROM lease
    WHERE r.id = lease.run_id AND r.status IN ('running', 'paused')
    RETURNING r.id
), event AS (
    INSERT INTO {schema}.history (run_id, at, event, attempt, worker_id, detail)
    SELECT id, {now}, 'run_compensating', %(attempt)s, %(worker_id)s, %(error)s::jsonb
    FROM marked
)
SELECT (SELECT count(*) FROM lease) AS leased, (SELECT count(*) FROM marked) AS changed;

-- name: run_retry
-- Revive a failed or cancelled run: it is queued again with a fresh task, and
-- the checkpoints of steps that did not complete are cleared so they run
-- again with fresh attempts. Completed steps stay memoized, so the run resumes
-- at the step that failed. A run whose compensation failed resumes its
-- compensations instead: only the failed compensation steps are cleared, and
-- the step that failed the run stays failed.
WITH revived AS (
    UPDATE {schema}.runs r
    SET status = CASE WHEN r.status = 'compensation_failed' THEN 'compensating'
                      ELSE 'queued' END,
        output = NULL, completed_at = NULL, updated_at = {now},
        error = CASE WHEN r.status = 'compensation_failed' THEN r.error END
    FROM (SELECT id, status AS previous FROM {schema}.runs WHERE id = %(run_id)s FOR UPDATE) o
    WHERE r.id = o.id AND r.status IN ('failed', 'cancelled', 'compensation_failed')
    RETURNING r.id, r.workflow, r.version, r.queue, o.previous
), cleared AS (
    DELETE FROM {schema}.steps s USING revived
    WHERE s.run_id = revived.id
      AND CASE WHEN revived.previous = 'compensation_failed'
               THEN s.kind = 'compensation' AND s.status <> 'completed'
               -- a gather's fail-fast choice goes with the failure it chose
               ELSE s.status <> 'completed' OR s.kind = 'gather' END
    RETURNING s.position
), task AS (
    INSERT INTO {schema}.tasks (run_id, kind, queue, workflow, version, status, available_at,
                                created_at)
    SELECT id, 'run', queue, workflow, version, 'ready', {now}, {now} FROM revived
), event AS (
    INSERT INTO {schema}.history (run_id, at, event, detail)
    SELECT id, {now}, 'run_retried',
           jsonb_build_object('cleared_steps', (SELECT count(*) FROM cleared),
                              'previous_status', previous)
    FROM revived
)
SELECT id FROM revived;

-- name: run_cancel
-- Cancel a run that has not finished. Its waiting or queued task is deleted;
-- a task a worker holds is left to that worker, which sees the cancellation
-- at its next ctx call (a step in flight finishes, its successor never
-- starts). SKIP LOCKED: a task being claimed this instant is let go by its
-- claimer once this commits. Returns the status before the call, so
-- cancelling twice is recognised as a no-op.
WITH target AS (
    SELECT id, status FROM {schema}.runs WHERE id = %(run_id)s FOR UPDATE
), cancelled AS (
    UPDATE {schema}.runs r
    SET status = 'cancelled', completed_at = {now}, updated_at = {now}, waiting_for = NULL,
        cancel_reason = %(reason)s::text,
        error = jsonb_build_object('type', 'Cancelled', 'message', %(reason)s::text)
    FROM target
    WHERE r.id = target.id
      AND target.status NOT IN ('completed', 'failed', 'cancelled', 'compensated',
                                'compensation_failed')
    RETURNING r.id
), dropped AS (
    DELETE FROM {schema}.tasks
    WHERE id IN (SELECT t.id FROM {schema}.tasks t JOIN cancelled c ON t.run_id = c.id
                 WHERE t.status <> 'claimed' FOR UPDATE OF t SKIP LOCKED)
    RETURNING id
), event AS (
    INSERT INTO {schema}.history (run_id, at, event, detail)
    SELECT id, {now}, 'run_cancelled', jsonb_build_object('reason', %(reason)s::text)
    FROM cancelled
)
SELECT target.status AS previous_status, (SELECT count(*) FROM cancelled) AS changed
FROM target;

-- name: run_pause
-- Pause an unfinished run: its task is not claimed until run_resume. A run
-- being executed now pauses at its next ctx call.
WITH target AS (
    SELECT id, status FROM {schema}.runs WHERE id = %(run_id)s FOR UPDATE
), paused AS (
    UPDATE {schema}.runs r SET status = 'paused', updated_at = {now}
    FROM target
    WHERE r.id = target.id AND target.status IN ('queued', 'running', 'waiting')
    RETURNING r.id
), parked AS (
    UPDATE {schema}.tasks SET status = 'paused'
    WHERE id IN (SELECT t.id FROM {schema}.tasks t JOIN paused p ON t.run_id = p.id
                 WHERE t.status = 'ready' FOR UPDATE OF t SKIP LOCKED)
), event AS (
    INSERT INTO {schema}.history (run_id, at, event) SELECT id, {now}, 'run_paused' FROM paused
)
SELECT target.status AS previous_status, (SELECT count(*) FROM paused) AS changed FROM target;

-- name: run_resume
-- Resume a paused run, or wake a sleeping one early: its task is due now,
-- and a durable sleep in progress counts as finished.
WITH target AS (
    SELECT id, status, waiting_for FROM {schema}.runs WHERE id = %(run_id)s FOR UPDATE
), resumed AS (
    UPDATE {schema}.runs r
    SET status = CASE WHEN target.status = 'paused' THEN 'queued' ELSE r.status END,
        updated_at = {now}
    FROM target
    WHERE r.id = target.id
      AND (target.status = 'paused'
           OR (target.status = 'waiting' AND target.waiting_for ? 'sleep'))
    RETURNING r.id
), woken AS (
    UPDATE {schema}.tasks SET status = 'ready', available_at = {now}
    WHERE id IN (SELECT t.id FROM {schema}.tasks t JOIN resumed r ON t.run_id = r.id
                 WHERE t.status IN ('paused', 'ready') FOR UPDATE OF t SKIP LOCKED)
), slept AS (
    UPDATE {schema}.steps s SET status = 'completed', completed_at = {now}
    FROM resumed
    WHERE s.run_id = resumed.id AND s.status = 'waiting' AND s.kind = 'sleep'
), event AS (
    INSERT INTO {schema}.history (run_id, at, event) SELECT id, {now}, 'run_resumed' FROM resumed
)
SELECT target.status AS previous_status, (SELECT count(*) FROM resumed) AS changed FROM target;

-- name: run_lock
-- Lock a run's row for the rest of the transaction: a wait for a signal
-- takes it before looking for the signal, as send_signal does before
-- writing one, so a signal is never missed between the two.
SELECT status FROM {schema}.runs WHERE id = %(run_id)s FOR UPDATE;

-- name: run_signal
-- Send a signal through the send_signal function (see migration 0002).
SELECT {schema}.send_signal(%(run)s, %(name)s, %(payload)s::jsonb, %(key)s, %(now)s) AS id;

-- name: run_expire
-- Cancel runs whose deadline passed, a batch at a time, with reason
-- "deadline". The partial index runs_deadline_at_idx holds only unfinished
-- runs that have a deadline. A task a worker holds is left to it: the worker
-- sees the cancellation at its next ctx call.
WITH expired AS (
    SELECT id FROM {schema}.runs
    WHERE deadline_at IS NOT NULL AND deadline_at < {now}
      AND status IN ('queued', 'running', 'waiting', 'paused')
    ORDER BY deadline_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), cancelled AS (
    UPDATE {schema}.runs r
    SET status = 'cancelled', completed_at = {now}, updated_at = {now}, waiting_for = NULL,
        cancel_reason = 'deadline',
        error = jsonb_build_object('type', 'Cancelled', 'message', 'deadline')
    FROM expired WHERE r.id = expired.id
    RETURNING r.id
), dropped AS (
    DELETE FROM {schema}.tasks
    WHERE id IN (SELECT t.id FROM {schema}.tasks t JOIN cancelled c ON t.run_id = c.id
                 WHERE t.status <> 'claimed' FOR UPDATE OF t SKIP LOCKED)
), event AS (
    INSERT INTO {schema}.history (run_id, at, event, detail)
    SELECT id, {now}, 'run_cancelled', jsonb_build_object('reason', 'deadline') FROM cancelled
)
SELECT count(*) AS cancelled FROM cancelled;
