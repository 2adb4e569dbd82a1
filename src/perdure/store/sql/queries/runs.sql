-- Named queries on runs: start, read, list, finish, pause, cancel, retry,
-- restart and fork, counts, graph-run progress, pruning and archived runs.
-- {schema} is the quoted schema name and {now} the clock: coalesce(%(now)s,
-- now()), so a test clock can stand in for the server's.

-- fragment: run_filter
-- The criteria of a RunFilter (RunFilter.params) but the status, over runs
-- aliased r: written once here, placed where a query says {run_filter}
-- (run_list, run_list_archived, run_select, run_count_by_status,
-- run_count_recent). Each criterion is skipped when its parameter is NULL;
-- those queries are never prepared (Statement.prepare = False), so, planned
-- with its values, the NULL criteria fold away and the plan takes the index
-- of those given.
(%(workflow)s::text IS NULL OR r.workflow = %(workflow)s::text)
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

-- name: run_insert
-- Start runs of one workflow, each with its first task and its history entry,
-- through insert_runs (migration 0015), the one definition of a start that
-- insert_run and start_run, the SQL entry points, call too: %(run_ids)s with
-- their keys and inputs, in order, sharing everything else (a single start is
-- a batch of one; app.start_many and the starts written together send many).
-- The answer's n is the item's place (1-based). A repeated key (already
-- taken, or repeated in the batch) answers the existing run, and a dedup_key
-- the run of its queue that waits to start with that key. Under a concurrent
-- insert of the same key in a repeatable-read transaction, an item may have
-- no row: the caller starts it again. With %(lookup)s (a caller without the
-- workflow's code), the workflow must be registered in the database: if it
-- is not, nothing is written and each item's row has a NULL id. Without a
-- pinned version (%(newest)s), the newest version registered in the database
-- wins if it is newer than the caller's code, with its queue.
SELECT r.*
FROM {schema}.insert_runs(
    %(run_ids)s::uuid[], %(workflow)s::text, %(version)s::integer, %(queue)s::text,
    %(keys)s::text[], %(inputs)s::text[]::jsonb[], {now}, %(priority)s::integer,
    %(delay_seconds)s::float8, %(parent_run_id)s::uuid, %(timeout_seconds)s::float8,
    %(partition_key)s::text, %(dedup_key)s::text, %(tags)s::jsonb,
    %(trace_context)s::jsonb, %(newest)s::boolean, %(lookup)s::boolean) AS r
ORDER BY r.n;

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
-- with its workflow and version (whose code rebuilds a typed result). A run
-- that continued as new answers for the last run of its chain (chain_end,
-- migration 0022), whose id is ``id``.
SELECT r.id, r.status, r.output, r.error, r.workflow, r.version
FROM {schema}.runs r
WHERE r.id = (SELECT CASE WHEN o.continued_to IS NULL THEN o.id
                          ELSE {schema}.chain_end(o.id) END
              FROM {schema}.runs o WHERE o.id = %(run_id)s);

-- name: run_continue
-- End a run as 'continued' and start its successor, in one statement
-- (continue_run, migration 0022), fenced on the run's task.
SELECT leased::int AS leased, changed::int AS changed, new_id, new_version
FROM {schema}.continue_run(%(task_id)s, %(worker_id)s, %(attempt)s, %(new_id)s::uuid,
                           %(input)s::jsonb, %(newest)s, {now});

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
-- run_list_archived has the same filters ({run_filter}) over the archive.
SELECT r.*,
       (SELECT count(*) FROM {schema}.steps s WHERE s.run_id = r.id AND s.status = 'completed')
           AS steps_completed
FROM {schema}.runs r
WHERE (%(status)s::text IS NULL OR r.status = %(status)s::text)
  AND {run_filter}
  AND (%(cursor_at)s::timestamptz IS NULL
       OR (r.created_at, r.id) < (%(cursor_at)s::timestamptz, %(cursor_id)s::uuid))
ORDER BY r.created_at DESC, r.id DESC
LIMIT %(limit)s;

-- name: run_complete
-- Finish runs with their outputs, one input row per run, each fenced on its
-- own task (a single completion is a batch of one; the worker's group commit
-- sends many runs' at once). A row with a position also records that run's
-- last step's checkpoint (a completed step) in the same statement: the hot
-- path's last round trip does both. The task is deleted and the run completed
-- only when the lease is the writer's and, with a checkpoint, that checkpoint
-- was written: a position that already holds a final checkpoint (a stale
-- replay) writes nothing and leaves the task held, so the caller hands it back
-- and the run is replayed from the real history. A run cancelled while its
-- last step ran keeps its checkpoint and stays cancelled; its task is deleted.
-- Step tasks still queued (a gather that failed fast) are dropped; one
-- being executed finishes, and its checkpoint deletes its task. The
-- completions come as one JSON array of objects, a row each (outputs as JSON
-- texts; the step's keys absent without a checkpoint): one parameter however
-- many there are. The answer has one row per input, in order.
WITH input AS (
    SELECT i.task_id, i.worker_id, i.attempt, i.position, i.name, i.kind, i.step_attempts,
           i.step_output::jsonb AS step_output, i.started_at, i.output::jsonb AS output, i.n
    FROM ROWS FROM (json_to_recordset(%(rows)s::json) AS (
             task_id bigint, worker_id text, attempt integer, position integer, name text,
             kind text, step_attempts integer, step_output text, started_at timestamptz,
             output text))
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
    WHERE i.position IS NOT NULL
    ORDER BY i.n
    ON CONFLICT (run_id, position) DO UPDATE
    SET status = EXCLUDED.status, attempts = EXCLUDED.attempts, output = EXCLUDED.output,
        error = EXCLUDED.error, worker_id = EXCLUDED.worker_id,
        started_at = EXCLUDED.started_at, completed_at = EXCLUDED.completed_at
    WHERE {schema}.steps.status IN ('pending', 'retrying', 'waiting')
      AND {schema}.steps.name = EXCLUDED.name
    RETURNING run_id, position, name, attempts, worker_id, started_at
), done AS (
    -- One row per run here, so a run's checkpoint names its task.
    DELETE FROM {schema}.tasks t
    USING lease l JOIN input i ON i.task_id = l.task_id
    WHERE t.id = l.task_id
      AND (i.position IS NULL OR l.run_id IN (SELECT run_id FROM checkpoint))
    RETURNING t.id AS task_id, t.run_id
), finished AS (
    UPDATE {schema}.runs r
    SET status = 'completed', output = i.output, error = NULL, waiting_for = NULL,
        completed_at = {now}, updated_at = {now}
    FROM done d JOIN input i ON i.task_id = d.task_id
    -- A run cancelled while its last step ran stays cancelled.
    WHERE r.id = d.run_id AND r.status IN ('running', 'paused')
    RETURNING r.id, i.task_id, i.attempt, i.worker_id,
              CASE WHEN isfinite(r.started_at) THEN r.completed_at - r.started_at END AS took
), leftovers AS (
    DELETE FROM {schema}.tasks
    WHERE id IN (SELECT t.id FROM {schema}.tasks t JOIN done d ON t.run_id = d.run_id
                 WHERE t.id <> d.task_id AND t.status <> 'claimed'
                 FOR UPDATE OF t SKIP LOCKED)
), event AS (
    INSERT INTO {schema}.history (run_id, at, event, step_position, step_name, attempt, worker_id,
                                  duration)
    SELECT run_id, {now}, 'step_completed', position, name, attempts, worker_id,
           coalesce(%(now)s::timestamptz, clock_timestamp()) - started_at
    FROM checkpoint
    UNION ALL
    SELECT id, {now}, 'run_completed', NULL, NULL, attempt, worker_id, took
    FROM finished
)
-- Membership tests (hashed subplans) rather than joins of the CTEs: the
-- planner cannot size a CTE's answer and would join them in nested loops.
-- A task is deleted exactly when its run's checkpoint (if any) was written.
SELECT i.task_id, (i.task_id IN (SELECT task_id FROM lease))::int AS leased,
       (i.task_id IN (SELECT task_id FROM done))::int AS written,
       (i.task_id IN (SELECT task_id FROM finished))::int AS changed
FROM input i
ORDER BY i.n;

-- name: run_fail
-- End a run that failed for good: status %(status)s ('failed', or after its
-- compensations 'compensated' / 'compensation_failed') with its error and
-- traceback (merged into the error already recorded, if any: compensations
-- add what failed to the original failure), task deleted, history written.
-- Fenced like run_complete. %(any_state)s: also a run that waits (for the
-- gather a step task belongs to): a run whose stored data cannot be read
-- fails from whichever of its tasks found it.
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
    WHERE r.id = lease.run_id
      AND (r.status IN ('running', 'paused', 'compensating')
           OR (%(any_state)s AND r.status = 'waiting'))
    RETURNING r.id, CASE WHEN isfinite(r.started_at) THEN r.completed_at - r.started_at END AS took
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
-- Queue failed or cancelled runs again (%(run_ids)s; app.retry passes one, a bulk
-- retry a batch): each is queued again with a fresh task, and the checkpoints
-- of steps that did not complete are cleared so they run again with fresh
-- attempts. Completed steps stay memoized, so the run resumes at the step
-- that failed. A run whose compensation failed resumes its compensations
-- instead: only the failed compensation steps are cleared, and the step that
-- failed the run stays failed. %(statuses)s, when not NULL, narrows the
-- statuses queued again (a bulk retry's filter, checked again under the row lock).
-- Rows are locked in id order, so two batches never deadlock. The statuses
-- are tested on the locked rows (o), not on runs (r): a test on r invites the
-- planner to scan runs by status and join the batch to every row it finds.
WITH o AS MATERIALIZED (
    SELECT id, status AS previous FROM {schema}.runs
    WHERE id IN (SELECT unnest(%(run_ids)s::uuid[])) ORDER BY id FOR UPDATE
), retried AS (
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
    DELETE FROM {schema}.steps s USING retried
    WHERE s.run_id = retried.id
      AND CASE WHEN retried.previous = 'compensation_failed'
               THEN s.kind = 'compensation' AND s.status <> 'completed'
               -- a gather's fail-fast choice goes with the failure it chose
               ELSE s.status <> 'completed' OR s.kind = 'gather' END
    RETURNING s.run_id, s.position
), task AS (
    INSERT INTO {schema}.tasks (run_id, kind, queue, workflow, version, priority, partition_key,
                                status, available_at, created_at)
    SELECT id, 'run', queue, workflow, version, priority, partition_key, 'ready', {now}, {now}
    FROM retried
), event AS (
    INSERT INTO {schema}.history (run_id, at, event, detail)
    SELECT id, {now}, 'run_retried',
           jsonb_build_object('cleared_steps',
                              (SELECT count(*) FROM cleared c WHERE c.run_id = retried.id),
                              'previous_status', previous)
    FROM retried
)
SELECT id FROM retried;

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

-- name: run_signal_many
-- Send many signals in one statement, each through send_signal, as
-- run_signal does one. %(ids)s holds each item's run reference as a uuid when
-- it has the form of one (else NULL). The signals are sent in the order of
-- their runs' ids (found as send_signal finds them: by id, then by key), then
-- of the items, so that a run's signals keep their order and two batches lock
-- the runs they share in the same order. A refusal (no such run, a finished
-- one) aborts the statement: nothing of the batch is written. Volatile output
-- expressions are evaluated after the ORDER BY sort.
SELECT s.item, {schema}.send_signal(s.run, s.name, s.payload::jsonb, s.key, %(now)s) AS id
FROM unnest(%(runs)s::text[], %(ids)s::uuid[], %(names)s::text[], %(payloads)s::text[],
            %(keys)s::text[])
     WITH ORDINALITY AS s(run, id, name, payload, key, item)
ORDER BY coalesce((SELECT r.id FROM {schema}.runs r WHERE r.id = s.id),
                  (SELECT r.id FROM {schema}.runs r WHERE r.key = s.run)),
         s.item;

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
    RETURNING r.id, CASE WHEN isfinite(r.started_at) THEN r.completed_at - r.started_at END AS took
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

-- name: run_set_schedule
-- Mark a run just started by a schedule with the schedule and the tick it
-- covers (ctx.scheduled_at), in the transaction that started it.
UPDATE {schema}.runs
SET schedule = %(schedule)s, scheduled_at = %(scheduled_at)s
WHERE id = %(run_id)s;

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
    RETURNING id, CASE WHEN isfinite(started_at) THEN completed_at - started_at END AS took
), leftovers AS (
    DELETE FROM {schema}.tasks
    WHERE id IN (SELECT t.id FROM {schema}.tasks t JOIN finished f ON t.run_id = f.id
                 WHERE t.status <> 'claimed' FOR UPDATE OF t SKIP LOCKED)
), event AS (
    INSERT INTO {schema}.history (run_id, at, event, detail, duration)
    SELECT id, {now}, 'run_' || %(status)s, %(error)s::jsonb, took FROM finished
)
SELECT count(*) AS changed FROM finished;

-- name: run_child_status
-- Lock a child run's row (shared) and read its outcome: a parent about to
-- wait for it either sees it finished, or parks before the child's final
-- update, whose trigger then wakes the parent. A child that continued as
-- new answers for the last run of its chain (chain_end, migration 0022),
-- which keeps the parent: its end wakes the parent the same way.
SELECT r.status, r.output, r.error FROM {schema}.runs r
WHERE r.id = (SELECT CASE WHEN o.continued_to IS NULL THEN o.id
                          ELSE {schema}.chain_end(o.id) END
              FROM {schema}.runs o WHERE o.id = %(run_id)s)
FOR SHARE OF r;

-- name: run_select
-- One page of the runs a bulk operation (app.cancel_runs, app.retry_runs)
-- applies to, newest first: the filter of app.list_runs, narrowed to the
-- statuses the operation accepts (%(ids)s: only given runs). Keyset
-- paging: the page starts after (%(after_at)s, %(after_id)s), the last row of
-- the previous page, so runs created meanwhile (newer) are never visited and
-- the walk ends. Runs created in one transaction share created_at; the id
-- breaks the tie. Only what a preview prints is read, not inputs or outputs.
SELECT r.id, r.workflow, r.version, r.status, r.key, r.created_at
FROM {schema}.runs r
WHERE r.status = ANY(%(statuses)s::text[])
  AND {run_filter}
  AND (%(after_at)s::timestamptz IS NULL
       OR (r.created_at, r.id) < (%(after_at)s::timestamptz, %(after_id)s::uuid))
ORDER BY r.created_at DESC, r.id DESC
LIMIT %(limit)s;

-- name: run_copy
-- Start a new run from an existing one (app.restart, app.fork): the same
-- workflow, version, queue and input, a new id and first task, and the
-- original named in restarted_from (a restart) or forked_from and fork_step
-- (a fork). A fork also copies the original's checkpoints at %(positions)s,
-- the values its copied ctx.set_event steps published (the last per key) and
-- the stream values its copied ctx.write_stream steps wrote (the first n of
-- each stream), so the new run replays them instead of executing them. Only
-- final checkpoints are copied: a final row is never rewritten, so a change
-- of the original meanwhile cannot tear the copy. History: 'run_created' on
-- the new run, with its lineage, and 'run_restarted' or 'run_forked' on the
-- original. A repeated key returns the run that has it, as run_insert does.
WITH source AS (
    SELECT * FROM {schema}.runs WHERE id = %(source_id)s::uuid
), inserted AS (
    INSERT INTO {schema}.runs (id, workflow, version, queue, key, status, input,
                               created_at, updated_at, restarted_from, forked_from, fork_step)
    SELECT %(run_id)s::uuid, workflow, version, queue, %(key)s::text, 'queued', input, {now}, {now},
           CASE WHEN %(fork_step)s::text IS NULL THEN id END,
           CASE WHEN %(fork_step)s::text IS NOT NULL THEN id END,
           %(fork_step)s::text
    FROM source
    ON CONFLICT (key) DO NOTHING
    RETURNING id, workflow, version, queue, status, created_at
), copied AS (
    INSERT INTO {schema}.steps (run_id, position, name, kind, status, attempts, output, error,
                                worker_id, started_at, completed_at, wake_at)
    SELECT i.id, s.position, s.name, s.kind, s.status, s.attempts, s.output, s.error,
           s.worker_id, s.started_at, s.completed_at, s.wake_at
    FROM {schema}.steps s CROSS JOIN inserted i
    WHERE s.run_id = %(source_id)s::uuid AND s.position = ANY(%(positions)s::int[])
      AND s.status IN ('completed', 'failed', 'timed_out', 'skipped')
    RETURNING run_id, position, name, kind, output
), published AS (
    INSERT INTO {schema}.events (run_id, key, value, position, updated_at)
    SELECT DISTINCT ON (c.name) c.run_id, substr(c.name, 7), c.output, c.position, {now}
    FROM copied c
    WHERE c.kind = 'event'
    ORDER BY c.name, c.position DESC
), streamed AS (
    INSERT INTO {schema}.streams (run_id, key, seq, value, closed, created_at)
    SELECT i.id, st.key, st.seq, st.value, st.closed, st.created_at
    FROM {schema}.streams st CROSS JOIN inserted i
    WHERE st.run_id = %(source_id)s::uuid
      AND st.seq <= (SELECT count(*) FROM copied c
                     WHERE c.kind = 'stream' AND c.name = 'stream:' || st.key)
), task AS (
    INSERT INTO {schema}.tasks (run_id, kind, queue, workflow, version, priority, status,
                                available_at, created_at)
    SELECT id, 'run', queue, workflow, version, %(priority)s::int, 'ready', {now}, {now}
    FROM inserted
), created AS (
    INSERT INTO {schema}.history (run_id, at, event, detail)
    SELECT i.id, {now}, 'run_created',
           jsonb_strip_nulls(jsonb_build_object(
               'workflow', i.workflow, 'version', i.version, 'queue', i.queue, 'key', %(key)s::text,
               'restarted_from', CASE WHEN %(fork_step)s::text IS NULL THEN %(source_id)s::uuid END,
               'forked_from', CASE WHEN %(fork_step)s::text IS NOT NULL THEN %(source_id)s::uuid END,
               'fork_step', %(fork_step)s::text,
               'copied_steps', CASE WHEN %(fork_step)s::text IS NOT NULL
                                    THEN (SELECT count(*) FROM copied) END))
    FROM inserted i
), origin AS (
    INSERT INTO {schema}.history (run_id, at, event, detail)
    SELECT %(source_id)s::uuid, {now},
           CASE WHEN %(fork_step)s::text IS NULL THEN 'run_restarted' ELSE 'run_forked' END,
           jsonb_strip_nulls(jsonb_build_object('run_id', i.id, 'fork_step', %(fork_step)s::text))
    FROM inserted i
)
SELECT id, workflow, true AS created, (SELECT count(*) FROM copied) AS copied FROM inserted
UNION ALL
SELECT id, workflow, false AS created, 0 AS copied
FROM {schema}.runs
WHERE key = %(key)s::text AND NOT EXISTS (SELECT 1 FROM inserted);

-- name: run_count_by_status
-- How many runs match a RunFilter (app.count_runs: the criteria of run_list
-- but the status), per status, each count stopping at %(cap)s: every status
-- is counted by its own bounded scan of the (status, created_at) index, so
-- the page costs the same with a million finished runs behind it (a count at
-- the cap reads "cap or more"). count_runs sends a narrowing filter
-- (RunFilter.narrowing) to run_count_recent instead.
SELECT s.status,
       (SELECT count(*) FROM (
            SELECT 1 FROM {schema}.runs r
            WHERE r.status = s.status
              AND {run_filter}
            LIMIT %(cap)s) capped) AS n
FROM unnest(%(statuses)s::text[]) AS s(status);

-- name: run_count_recent
-- How many of the newest %(cap)s runs matching a workflow, version, queue,
-- worker, key, parent, tags or run ids filter are in each status. One
-- ordered scan of the index that serves the filter ((workflow, created_at),
-- (worker_id, created_at), parent_run_id, tags, or created_at), stopped at
-- %(cap)s rows: a per-status count of a narrow filter would walk the status
-- index past every run that does not match.
SELECT newest.status, count(*) AS n
FROM (SELECT r.status
      FROM {schema}.runs r
      WHERE {run_filter}
      ORDER BY r.created_at DESC
      LIMIT %(cap)s) newest
GROUP BY newest.status;

-- name: run_activity
-- Runs created since %(since)s, counted per time bucket of
-- %(bucket_seconds)s and per status (what they became): the overview's chart.
-- A range scan of runs_created_at_idx, bounded by the window.
SELECT date_bin(make_interval(secs => %(bucket_seconds)s::float8), r.created_at,
                %(since)s::timestamptz) AS bucket,
       r.status, count(*) AS n
FROM {schema}.runs r
WHERE r.created_at >= %(since)s::timestamptz
GROUP BY 1, 2
ORDER BY 1, 2;

-- name: run_prune
-- Delete (or, with %(archive)s, move to the archive tables) one batch of at
-- most %(limit)s runs that finished before %(before)s, oldest first, in one
-- statement: its own short transaction. Left alone: a run that is not final,
-- a run with a child that is not final, a child whose parent is not final (it
-- may still read its result), and a run with a task a worker holds (a
-- step task finishing after its run ended). SKIP LOCKED: a run whose row
-- someone holds now (a retry, a signal) is skipped, not waited for. Steps,
-- tasks, signals, events and streams go with their run (ON DELETE CASCADE);
-- history rows stay in their day partition, which retention drops whole,
-- except those in the default partition, deleted here. The archive copies
-- read the statement's snapshot, taken before the delete.
WITH doomed AS (
    SELECT r.id
    FROM {schema}.runs r
    WHERE r.status IN ('completed', 'failed', 'cancelled', 'compensated', 'compensation_failed',
                       'continued')
      AND r.completed_at < %(before)s
      AND NOT EXISTS (SELECT 1 FROM {schema}.runs c
                      WHERE c.parent_run_id = r.id
                        AND c.status NOT IN ('completed', 'failed', 'cancelled', 'compensated',
                                             'compensation_failed'))
      AND NOT EXISTS (SELECT 1 FROM {schema}.runs p
                      WHERE p.id = r.parent_run_id
                        AND p.status NOT IN ('completed', 'failed', 'cancelled', 'compensated',
                                             'compensation_failed'))
      AND NOT EXISTS (SELECT 1 FROM {schema}.tasks t
                      WHERE t.run_id = r.id AND t.status = 'claimed')
    ORDER BY r.completed_at
    LIMIT %(limit)s
    FOR UPDATE OF r SKIP LOCKED
), archived_runs AS (
    INSERT INTO {schema}.archive_runs
    SELECT r.* FROM {schema}.runs r JOIN doomed d ON d.id = r.id WHERE %(archive)s
), archived_steps AS (
    INSERT INTO {schema}.archive_steps
    SELECT s.* FROM {schema}.steps s JOIN doomed d ON d.id = s.run_id WHERE %(archive)s
), archived_history AS (
    INSERT INTO {schema}.archive_history
    SELECT h.* FROM {schema}.history h JOIN doomed d ON d.id = h.run_id WHERE %(archive)s
), archived_signals AS (
    INSERT INTO {schema}.archive_signals
    SELECT s.* FROM {schema}.signals s JOIN doomed d ON d.id = s.run_id WHERE %(archive)s
), archived_events AS (
    INSERT INTO {schema}.archive_events
    SELECT e.* FROM {schema}.events e JOIN doomed d ON d.id = e.run_id WHERE %(archive)s
), archived_streams AS (
    INSERT INTO {schema}.archive_streams
    SELECT s.* FROM {schema}.streams s JOIN doomed d ON d.id = s.run_id WHERE %(archive)s
), stragglers AS (
    DELETE FROM {schema}.history_default h USING doomed d WHERE h.run_id = d.id
), offloaded AS (
    -- The object references (offloaded payloads) of the runs deleted, read
    -- from the statement's snapshot: the caller deletes those objects.
    SELECT v -> '$perdure' ->> 'ref' AS ref
    FROM (
        SELECT r.input AS v FROM {schema}.runs r JOIN doomed d ON d.id = r.id
        UNION ALL SELECT r.output FROM {schema}.runs r JOIN doomed d ON d.id = r.id
        UNION ALL SELECT r.error FROM {schema}.runs r JOIN doomed d ON d.id = r.id
        UNION ALL SELECT s.output FROM {schema}.steps s JOIN doomed d ON d.id = s.run_id
        UNION ALL SELECT s.error FROM {schema}.steps s JOIN doomed d ON d.id = s.run_id
        UNION ALL SELECT g.payload FROM {schema}.signals g JOIN doomed d ON d.id = g.run_id
        UNION ALL SELECT e.value FROM {schema}.events e JOIN doomed d ON d.id = e.run_id
        UNION ALL SELECT t.value FROM {schema}.streams t JOIN doomed d ON d.id = t.run_id
        UNION ALL SELECT l.records FROM {schema}.step_logs l JOIN doomed d ON d.id = l.run_id
        -- History stays in its day partition after its run is gone, until
        -- the partition is dropped: nothing reads it, its objects go now.
        UNION ALL SELECT h.detail FROM {schema}.history h JOIN doomed d ON d.id = h.run_id
    ) payloads
    WHERE NOT %(archive)s AND %(offloaded)s
      AND jsonb_typeof(v) = 'object' AND jsonb_typeof(v -> '$perdure') = 'object'
      AND v -> '$perdure' ? 'ref'
), deleted AS (
    DELETE FROM {schema}.runs r USING doomed d WHERE r.id = d.id
    RETURNING r.id
)
SELECT (SELECT count(*) FROM deleted) AS pruned,
       (SELECT coalesce(array_agg(ref), ARRAY[]::text[]) FROM offloaded) AS refs;

-- name: run_prune_count
-- How many runs run_prune would take, in every batch together: the same
-- conditions, without locking or limit (perdure prune --dry-run).
SELECT count(*) AS prunable
FROM {schema}.runs r
WHERE r.status IN ('completed', 'failed', 'cancelled', 'compensated', 'compensation_failed')
  AND r.completed_at < %(before)s
  AND NOT EXISTS (SELECT 1 FROM {schema}.runs c
                  WHERE c.parent_run_id = r.id
                    AND c.status NOT IN ('completed', 'failed', 'cancelled', 'compensated',
                                         'compensation_failed'))
  AND NOT EXISTS (SELECT 1 FROM {schema}.runs p
                  WHERE p.id = r.parent_run_id
                    AND p.status NOT IN ('completed', 'failed', 'cancelled', 'compensated',
                                         'compensation_failed'))
  AND NOT EXISTS (SELECT 1 FROM {schema}.tasks t WHERE t.run_id = r.id AND t.status = 'claimed');

-- name: run_prune_cutoff
-- The time %(seconds)s seconds before now, on the clock every query uses.
SELECT {now} - make_interval(secs => %(seconds)s) AS cutoff;

-- name: run_get_archived
-- One archived run by id.
SELECT *, true AS archived FROM {schema}.archive_runs WHERE id = %(run_id)s;

-- name: run_get_by_key_archived
-- The newest archived run with this key (keys may repeat in the archive: a
-- key is free again once its run is archived).
SELECT *, true AS archived FROM {schema}.archive_runs
WHERE key = %(key)s
ORDER BY created_at DESC, id DESC
LIMIT 1;

-- name: run_list_archived
-- run_list over the archive: the same filters and keyset page,
-- served by archive_runs_created_at_idx.
SELECT r.*, true AS archived,
       (SELECT count(*) FROM {schema}.archive_steps s
        WHERE s.run_id = r.id AND s.status = 'completed') AS steps_completed
FROM {schema}.archive_runs r
WHERE (%(status)s::text IS NULL OR r.status = %(status)s::text)
  AND {run_filter}
  AND (%(cursor_at)s::timestamptz IS NULL
       OR (r.created_at, r.id) < (%(cursor_at)s::timestamptz, %(cursor_id)s::uuid))
ORDER BY r.created_at DESC, r.id DESC
LIMIT %(limit)s;
