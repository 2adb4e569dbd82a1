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
