-- Named queries on step checkpoints.

-- name: step_list
-- The checkpoints of one run, in position order: what replay reads.
SELECT position, name, kind, status, attempts, output, error, worker_id, started_at, completed_at,
       wake_at
FROM {schema}.steps
WHERE run_id = %(run_id)s
ORDER BY position;

-- name: step_list_before
-- The checkpoints a gather's parallel step replays with: those before its
-- gather, and its own. Its siblings' rows are not read, so a map over n items
-- costs each of its n tasks the workflow's prefix, not n rows.
SELECT position, name, kind, status, attempts, output, error, worker_id, started_at, completed_at,
       wake_at
FROM {schema}.steps
WHERE run_id = %(run_id)s AND (position < %(before)s OR position = %(position)s)
ORDER BY position;

-- name: step_list_claimed_now
-- The checkpoints of the tasks this worker claimed in this very transaction
-- (claimed_at is the transaction's time), sent in the same pipeline right
-- after task_claim: one round trip claims and reads. As a later statement of
-- the transaction it has a fresh snapshot, so it sees every checkpoint
-- committed before the claim (see task_claim). A gather's parallel step
-- gets those before its gather and its own, like step_list_before.
SELECT t.id AS task_id, s.position, s.name, s.kind, s.status, s.attempts, s.output, s.error,
       s.worker_id, s.started_at, s.completed_at, s.wake_at
FROM {schema}.tasks t
JOIN {schema}.steps s ON s.run_id = t.run_id
WHERE t.worker_id = %(worker_id)s AND t.status = 'claimed' AND t.claimed_at = {now}
  AND (t.kind = 'run' OR t.gather_start IS NULL OR s.position < t.gather_start
       OR s.position = t.step_position)
ORDER BY t.id, s.position;

-- name: step_checkpoint
-- Record a step's outcome (completed, failed permanently, or a failed attempt
-- that will be retried) and extend the lease, in one statement. Fenced: with
-- the lease gone nothing is written and the caller gets LeaseLost. Updating
-- the task row also takes its row lock, so the reaper cannot revive the task
-- between the fence check and the commit. A 'retrying' row may be replaced by
-- a later attempt (and a parallel step's 'pending' row by its first); a final
-- row never is.
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
    WHERE {schema}.steps.status IN ('pending', 'retrying', 'waiting')
      AND {schema}.steps.name = EXCLUDED.name
    RETURNING run_id
), event AS (
    -- The entry's duration is the attempt's: from its start to this checkpoint.
    INSERT INTO {schema}.history (run_id, at, event, step_position, step_name, attempt, worker_id,
                                  detail, duration)
    SELECT run_id, {now}, %(event)s, %(position)s, %(name)s, %(attempts)s, %(worker_id)s,
           %(detail)s::jsonb,
           coalesce(%(now)s::timestamptz, clock_timestamp()) - %(started_at)s::timestamptz
    FROM checkpoint
), published AS (
    -- ctx.set_event and ctx.write_stream publish in the checkpoint's statement,
    -- so a replay never publishes twice.
    INSERT INTO {schema}.events (run_id, key, value, position, updated_at)
    SELECT run_id, %(event_key)s, %(output)s::jsonb, %(position)s, {now}
    FROM checkpoint WHERE %(kind)s = 'event'
    ON CONFLICT (run_id, key) DO UPDATE
    SET value = EXCLUDED.value, position = EXCLUDED.position, updated_at = EXCLUDED.updated_at
), streamed AS (
    INSERT INTO {schema}.streams (run_id, key, seq, value, closed, created_at)
    SELECT run_id, %(event_key)s, %(stream_seq)s, %(output)s::jsonb, %(stream_closed)s, {now}
    FROM checkpoint WHERE %(kind)s = 'stream'
)
SELECT (SELECT count(*) FROM lease) AS leased, (SELECT count(*) FROM checkpoint) AS written,
       (SELECT r.status FROM {schema}.runs r JOIN lease ON r.id = lease.run_id) AS run_status;

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
SELECT (SELECT count(*) FROM lease) AS leased, (SELECT count(*) FROM taken) AS taken,
       (SELECT payload FROM taken) AS payload, {now} AS db_now;

-- name: event_get
-- The latest value a run published under an event key.
SELECT value FROM {schema}.events WHERE run_id = %(run_id)s AND key = %(key)s;

-- name: stream_read
-- Stream values after position %(after)s, in order, with the run's status.
SELECT seq, value, closed,
       (SELECT status FROM {schema}.runs WHERE id = %(run_id)s) AS run_status
FROM {schema}.streams
WHERE run_id = %(run_id)s AND key = %(key)s AND seq > %(after)s
ORDER BY seq
LIMIT 1000;

-- name: signal_list
-- The signals a run received, oldest first.
SELECT id, name, payload, key, created_at, consumed_at, consumed_position
FROM {schema}.signals WHERE run_id = %(run_id)s ORDER BY id;
