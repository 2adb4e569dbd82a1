-- Named queries that read archived runs: the rows `perdure prune --archive`
-- moved to the archive tables. Each row says archived = true.

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
-- run_list (run.sql) over the archive: the same filters and keyset page,
-- served by archive_runs_created_at_idx.
SELECT r.*, true AS archived,
       (SELECT count(*) FROM {schema}.archive_steps s
        WHERE s.run_id = r.id AND s.status = 'completed') AS steps_completed
FROM {schema}.archive_runs r
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

-- name: step_list_archived
-- The checkpoints of an archived run, in position order.
SELECT position, name, kind, status, attempts, output, error, worker_id, started_at, completed_at,
       wake_at
FROM {schema}.archive_steps
WHERE run_id = %(run_id)s
ORDER BY position;

-- name: history_list_archived
-- The history of an archived run, oldest first.
SELECT id, at, event, step_position, step_name, attempt, worker_id, detail, duration
FROM {schema}.archive_history
WHERE run_id = %(run_id)s
ORDER BY id;
