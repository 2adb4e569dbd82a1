-- Named queries on step checkpoints.

-- name: step_list
-- The checkpoints of one run, in position order: what replay reads.
SELECT position, name, kind, status, attempts, output, error, worker_id, started_at, completed_at
FROM {schema}.steps
WHERE run_id = %(run_id)s
ORDER BY position;

-- name: step_checkpoint
-- Record a step's outcome (completed, failed permanently, or a failed attempt
-- that will be retried) and extend the lease, in one statement. Fenced: with
-- the lease gone nothing is written and the caller gets LeaseLost. Updating
-- the task row also takes its row lock, so the reaper cannot revive the task
-- between the fence check and the commit. A 'retrying' row may be replaced by
-- a later attempt; a final row never is.
WITH lease AS (
    UPDATE {schema}.tasks
    SET lease_expires_at = {now} + make_interval(secs => %(lease_seconds)s)
    WHERE id = %(task_id)s AND worker_id = %(worker_id)s AND attempt = %(attempt)s
      AND status = 'claimed'
    RETURNING run_id
), checkpoint AS (
    INSERT INTO {schema}.steps (run_id, position, name, kind, status, attempts, output, error,
                                worker_id, started_at, completed_at)
    SELECT run_id, %(position)s, %(name)s, %(kind)s, %(status)s, %(attempts)s, %(output)s::jsonb,
           %(error)s::jsonb, %(worker_id)s, %(started_at)s,
           -- clock_timestamp(), not now(): in a ctx.transaction step the
           -- transaction began before the user's SQL ran, and the step's
           -- duration must include that work.
           CASE WHEN %(status)s = 'retrying' THEN NULL
                ELSE coalesce(%(now)s::timestamptz, clock_timestamp()) END
    FROM lease
    ON CONFLICT (run_id, position) DO UPDATE
    SET status = EXCLUDED.status, attempts = EXCLUDED.attempts, output = EXCLUDED.output,
        error = EXCLUDED.error, worker_id = EXCLUDED.worker_id,
        started_at = EXCLUDED.started_at, completed_at = EXCLUDED.completed_at
    WHERE {schema}.steps.status = 'retrying' AND {schema}.steps.name = EXCLUDED.name
    RETURNING run_id
), event AS (
    INSERT INTO {schema}.history (run_id, at, event, step_position, step_name, attempt, worker_id,
                                  detail)
    SELECT run_id, {now}, %(event)s, %(position)s, %(name)s, %(attempts)s, %(worker_id)s,
           %(detail)s::jsonb
    FROM checkpoint
)
SELECT (SELECT count(*) FROM lease) AS leased, (SELECT count(*) FROM checkpoint) AS written;
