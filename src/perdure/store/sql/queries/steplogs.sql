-- Named queries on the log records of step attempts (table step_logs).

-- name: steplog_write
-- Record the log records of one step attempt. Written again (a replayed
-- attempt number after a lost lease), the newer records replace the older.
INSERT INTO {schema}.step_logs (run_id, position, attempt, name, worker_id, status, records,
                                truncated, created_at)
VALUES (%(run_id)s, %(position)s, %(attempt)s, %(name)s, %(worker_id)s, %(status)s,
        %(records)s::jsonb, %(truncated)s, {now})
ON CONFLICT (run_id, position, attempt) DO UPDATE
SET name = EXCLUDED.name, worker_id = EXCLUDED.worker_id, status = EXCLUDED.status,
    records = EXCLUDED.records, truncated = EXCLUDED.truncated, created_at = EXCLUDED.created_at;

-- name: steplog_list
-- The log records of a run's step attempts, by step position then attempt;
-- only those of step %(name)s when it is not null.
SELECT position, attempt, name, worker_id, status, records, truncated, created_at
FROM {schema}.step_logs
WHERE run_id = %(run_id)s AND (%(name)s::text IS NULL OR name = %(name)s::text)
ORDER BY position, attempt;
