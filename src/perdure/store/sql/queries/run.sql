-- Named queries on runs. {schema} is the quoted schema name and {now} the
-- clock: coalesce(%(now)s, now()), so a test clock can stand in for the server's.

-- name: run_insert
-- Start a run: the run row, its first task and its history entry, through
-- the insert_run function (migration 0011), the one definition of a start
-- that start_run, the SQL entry point, calls too. A repeated key returns the
-- existing run, and a dedup_key the run of its queue that waits to start
-- with that key. Under a concurrent insert of the same key in a
-- repeatable-read transaction, the answer may be no row: the caller runs it
-- again. With %(lookup)s (a caller without the workflow's code), the
-- workflow must be registered in the database: if it is not, nothing is
-- written and the answer is one row whose id is NULL. Without a pinned
-- version (%(newest)s), the newest version registered in the database wins
-- if it is newer than the caller's code, with its queue.
SELECT * FROM {schema}.insert_run(
    %(run_id)s::uuid, %(workflow)s::text, %(version)s::integer, %(queue)s::text,
    %(key)s::text, %(input)s::jsonb, {now}, %(priority)s::integer,
    %(delay_seconds)s::float8, %(parent_run_id)s::uuid, %(timeout_seconds)s::float8,
    %(partition_key)s::text, %(dedup_key)s::text, %(tags)s::jsonb,
    %(trace_context)s::jsonb, %(newest)s::boolean, %(lookup)s::boolean);

-- name: run_debounce
-- A debounced start: give the run that has this key (or this dedup_key in
-- its queue) and has not started yet the latest input. Its start time is
-- left as it is: the window opened by the first start. The run's row lock
-- orders this against the claim, whose update of the same row returns the
-- input it finds after waiting (see task_claim), so the run executes with
-- the input of the last start that collapsed into it. No row: nothing to
-- collapse into, the caller inserts a new run.
WITH target AS (
    SELECT id FROM {schema}.runs
    WHERE workflow = %(workflow)s AND status = 'queued' AND started_at IS NULL
      AND (key = %(key)s OR (queue = %(queue)s AND dedup_key = %(dedup_key)s))
    LIMIT 1
    FOR UPDATE
), debounced AS (
    UPDATE {schema}.runs r
    SET input = %(input)s::jsonb, tags = coalesce(%(tags)s::jsonb, r.tags), updated_at = {now}
    FROM target
    WHERE r.id = target.id AND r.status = 'queued' AND r.started_at IS NULL
    RETURNING r.id, r.workflow, r.status, r.created_at
), event AS (
    INSERT INTO {schema}.history (run_id, at, event)
    SELECT id, {now}, 'run_debounced' FROM debounced
)
SELECT id, workflow, status, created_at, false AS created FROM debounced;

-- name: run_get
-- One run by id.
SELECT * FROM {schema}.runs WHERE id = %(run_id)s;

-- name: run_get_by_key
-- One run by its caller-given key.
SELECT * FROM {schema}.runs WHERE key = %(key)s;

-- name: run_status
-- The fields a waiting caller polls: status, output and error of one run,
-- with its workflow and version (whose code rebuilds a typed result).
SELECT status, output, error, workflow, version FROM {schema}.runs WHERE id = %(run_id)s;

-- name: run_list
-- One page of runs, newest first: a keyset page on (created_at, id), after
-- the cursor row when one is given, so no run is repeated or skipped across
-- pages while new runs arrive (they are newer than the first page). Each
-- filter is skipped when its parameter is NULL. The statement is never
-- prepared (Statement.prepare = False): planned with its values, the NULL
-- filters fold away and the plan takes the index of the filters given:
-- runs_status_created_at_idx, runs_workflow_created_at_idx,
-- runs_worker_created_at_idx, runs_parent_run_id_idx, else
-- runs_created_at_idx (queue, version and key prefix filter its rows).
-- run_list_archived (archive.sql) has the same filters: keep them alike (a
-- unit test compares them).
SELECT r.*,
       (SELECT count(*) FROM {schema}.steps s WHERE s.run_id = r.id AND s.status = 'completed')
           AS steps_completed
FROM {schema}.runs r
WHERE (%(status)s::text IS NULL OR r.status = %(status)s::text)
  AND (%(workflow)s::text IS NULL OR r.workflow = %(workflow)s::text)
  AND (%(version)s::integer IS NULL OR r.version = %(version)s::integer)
  AND (%(queue)s::text IS NULL OR r.queue = %(queue)s::text)
  AND (%(worker)s::text IS NULL OR r.worker_id = %(worker)s::text)
  AND (%(key_prefix)s::text IS NULL OR starts_with(r.key, %(key_prefix)s::text))
  AND (%(since)s::timestamptz IS NULL OR r.created_at >= %(since)s::timestamptz)
  AND (%(before)s::timestamptz IS NULL OR r.created_at < %(before)s::timestamptz)
  AND (%(parent)s::uuid IS NULL OR r.parent_run_id = %(parent)s::uuid)
  -- Tags: runs whose tags contain every given pair (GIN index runs_tags_idx).
  AND (%(tags)s::jsonb IS NULL OR r.tags @> %(tags)s::jsonb)
  AND (%(ids)s::uuid[] IS NULL OR r.id = ANY(%(ids)s::uuid[]))
  AND (%(cursor_at)s::timestamptz IS NULL
       OR (r.created_at, r.id) < (%(cursor_at)s::timestamptz, %(cursor_id)s::uuid))
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
    RETURNING r.id, r.completed_at - r.started_at AS took
), leftovers AS (
    DELETE FROM {schema}.tasks
    WHERE id IN (SELECT t.id FROM {schema}.tasks t JOIN lease ON t.run_id = lease.run_id
                 WHERE t.id <> %(task_id)s AND t.status <> 'claimed'
                 FOR UPDATE OF t SKIP LOCKED)
), event AS (
    INSERT INTO {schema}.history (run_id, at, event, attempt, worker_id, duration)
    SELECT id, {now}, 'run_completed', %(attempt)s, %(worker_id)s, took FROM finished
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
    RETURNING r.id, r.completed_at - r.started_at AS took
), leftovers AS (
    DELETE FROM {schema}.tasks
    WHERE id IN (SELECT t.id FROM {schema}.tasks t JOIN lease ON t.run_id = lease.run_id
                 WHERE t.id <> %(task_id)s AND t.status <> 'claimed'
                 FOR UPDATE OF t SKIP LOCKED)
), event AS (
    INSERT INTO {schema}.history (run_id, at, event, attempt, worker_id, detail, duration)
    SELECT id, {now}, 'run_' || %(status)s, %(attempt)s, %(worker_id)s, %(error)s::jsonb, took
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
-- Revive failed or cancelled runs (%(run_ids)s; app.retry passes one, a bulk
-- retry a batch): each is queued again with a fresh task, and the checkpoints
-- of steps that did not complete are cleared so they run again with fresh
-- attempts. Completed steps stay memoized, so the run resumes at the step
-- that failed. A run whose compensation failed resumes its compensations
-- instead: only the failed compensation steps are cleared, and the step that
-- failed the run stays failed. %(statuses)s, when not NULL, narrows the
-- statuses revived (a bulk retry's filter, checked again under the row lock).
-- Rows are locked in id order, so two batches never deadlock. The statuses
-- are tested on the locked rows (o), not on runs (r): a test on r invites the
-- planner to scan runs by status and join the batch to every row it finds.
WITH o AS MATERIALIZED (
    SELECT id, status AS previous FROM {schema}.runs
    WHERE id IN (SELECT unnest(%(run_ids)s::uuid[])) ORDER BY id FOR UPDATE
), revived AS (
    UPDATE {schema}.runs r
    SET status = CASE WHEN o.previous = 'compensation_failed' THEN 'compensating'
                      ELSE 'queued' END,
        output = NULL, completed_at = NULL, updated_at = {now},
        error = CASE WHEN o.previous = 'compensation_failed' THEN r.error END
    FROM o
    WHERE r.id = o.id AND o.previous IN ('failed', 'cancelled', 'compensation_failed')
      AND (%(statuses)s::text[] IS NULL OR o.previous = ANY(%(statuses)s::text[]))
    RETURNING r.id, r.workflow, r.version, r.queue, r.priority, r.partition_key, o.previous
), cleared AS (
    DELETE FROM {schema}.steps s USING revived
    WHERE s.run_id = revived.id
      AND CASE WHEN revived.previous = 'compensation_failed'
               THEN s.kind = 'compensation' AND s.status <> 'completed'
               -- a gather's fail-fast choice goes with the failure it chose
               ELSE s.status <> 'completed' OR s.kind = 'gather' END
    RETURNING s.run_id, s.position
), task AS (
    INSERT INTO {schema}.tasks (run_id, kind, queue, workflow, version, priority, partition_key,
                                status, available_at, created_at)
    SELECT id, 'run', queue, workflow, version, priority, partition_key, 'ready', {now}, {now}
    FROM revived
), event AS (
    INSERT INTO {schema}.history (run_id, at, event, detail)
    SELECT id, {now}, 'run_retried',
           jsonb_build_object('cleared_steps',
                              (SELECT count(*) FROM cleared c WHERE c.run_id = revived.id),
                              'previous_status', previous)
    FROM revived
)
SELECT id FROM revived;

-- name: run_cancel
-- Cancel runs that have not finished (%(run_ids)s; app.cancel passes one, a
-- bulk cancel a batch), through the cancel_runs function (migration 0011),
-- which cancel_run, the SQL entry point, calls too. %(statuses)s, when not
-- NULL, narrows the statuses cancelled. Returns each run's status before
-- the call, so cancelling twice is recognised as a no-op.
SELECT * FROM {schema}.cancel_runs(%(run_ids)s::uuid[], %(reason)s::text,
                                   %(statuses)s::text[], {now});

-- name: run_pause
-- Pause an unfinished run through the pause_one function (migration 0011),
-- which pause_run calls too: its task is not claimed until run_resume.
SELECT * FROM {schema}.pause_one(%(run_id)s::uuid, {now});

-- name: run_resume
-- Resume a paused run, or wake a sleeping one early, through the resume_one
-- function (migration 0011), which resume_run calls too.
SELECT * FROM {schema}.resume_one(%(run_id)s::uuid, {now});

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
    RETURNING r.id, r.completed_at - r.started_at AS took
), dropped AS (
    DELETE FROM {schema}.tasks
    WHERE id IN (SELECT t.id FROM {schema}.tasks t JOIN cancelled c ON t.run_id = c.id
                 WHERE t.status <> 'claimed' FOR UPDATE OF t SKIP LOCKED)
), event AS (
    INSERT INTO {schema}.history (run_id, at, event, detail, duration)
    SELECT id, {now}, 'run_cancelled', jsonb_build_object('reason', 'deadline'), took
    FROM cancelled
)
SELECT count(*) AS cancelled FROM cancelled;
