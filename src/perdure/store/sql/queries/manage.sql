-- Named queries of workflow management: bulk operations, restart and fork.

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
  AND (%(workflow)s::text IS NULL OR r.workflow = %(workflow)s::text)
  AND (%(version)s::integer IS NULL OR r.version = %(version)s::integer)
  AND (%(queue)s::text IS NULL OR r.queue = %(queue)s::text)
  AND (%(worker)s::text IS NULL OR r.worker_id = %(worker)s::text)
  AND (%(key_prefix)s::text IS NULL OR starts_with(r.key, %(key_prefix)s::text))
  AND (%(since)s::timestamptz IS NULL OR r.created_at >= %(since)s::timestamptz)
  AND (%(before)s::timestamptz IS NULL OR r.created_at < %(before)s::timestamptz)
  AND (%(parent)s::uuid IS NULL OR r.parent_run_id = %(parent)s::uuid)
  AND (%(tags)s::jsonb IS NULL OR r.tags @> %(tags)s::jsonb)
  AND (%(ids)s::uuid[] IS NULL OR r.id = ANY(%(ids)s::uuid[]))
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
