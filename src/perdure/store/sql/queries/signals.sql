-- Named queries on signals: those a run received and those its waits take.

-- name: signal_take
-- Consume the oldest pending signal named %(name)s for the wait at
-- %(position)s and complete that wait's checkpoint with its payload, in one
-- statement. Run inside the transaction that took run_lock. Fenced.
WITH lease AS (
    SELECT run_id FROM {schema}.tasks
    WHERE id = %(task_id)s AND worker_id = %(worker_id)s AND attempt = %(attempt)s
      AND status = 'claimed'
), taken AS (
    UPDATE {schema}.signals s
    SET consumed_at = {now}, consumed_position = %(position)s
    WHERE s.id = (SELECT p.id FROM {schema}.signals p JOIN lease ON p.run_id = lease.run_id
                  WHERE p.name = %(name)s AND p.consumed_at IS NULL
                  ORDER BY p.id LIMIT 1)
    RETURNING s.run_id, s.id, s.payload
), checkpoint AS (
    INSERT INTO {schema}.steps (run_id, position, name, kind, status, attempts, output,
                                worker_id, started_at, completed_at)
    SELECT run_id, %(position)s, %(step_name)s, 'signal', 'completed', 1, payload,
           %(worker_id)s, {now}, {now}
    FROM taken
    ON CONFLICT (run_id, position) DO UPDATE
    SET status = 'completed', output = EXCLUDED.output, completed_at = EXCLUDED.completed_at,
        worker_id = EXCLUDED.worker_id
    WHERE {schema}.steps.status = 'waiting'
), event AS (
    INSERT INTO {schema}.history (run_id, at, event, step_position, step_name, attempt, worker_id,
                                  detail)
    SELECT run_id, {now}, 'signal_consumed', %(position)s, %(step_name)s, %(attempt)s,
           %(worker_id)s, jsonb_build_object('signal_id', id)
    FROM taken
)
-- written: a signal was taken and the wait completed with its payload.
SELECT (SELECT count(*) FROM lease) AS leased, (SELECT count(*) FROM taken) AS written,
       (SELECT payload FROM taken) AS payload, {now} AS db_now;

-- name: signal_list
-- The signals a run received, oldest first; only signal %(signal_id)s when
-- it is not null (by its primary key: one row, however many the run has).
SELECT id, name, payload, key, created_at, consumed_at, consumed_position
FROM {schema}.signals
WHERE run_id = %(run_id)s AND (%(signal_id)s::bigint IS NULL OR id = %(signal_id)s::bigint)
ORDER BY id;

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
