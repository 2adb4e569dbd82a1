-- Named queries on updates: requests into a run, their decision and reply.

-- name: update_request
-- Record update %(update_id)s of run %(run_id)s unless it exists, and wake the
-- run if it waits, through request_update (migration 0021): the run's status.
SELECT {schema}.request_update(%(run_id)s, %(update_id)s, %(name)s, %(payload)s::jsonb,
                               {now}) AS run_status;

-- name: update_get
-- One update of a run and the status of the run that holds it: what a caller
-- polls for its reply. A request moves to the successor of a run that
-- continued as new (update_found, migration 0024 looks there too); live_id is
-- the chain's last run, whose NOTIFY the caller then listens for.
SELECT f.name, f.status, f.result, f.error, f.run_status, f.run_id AS live_id
FROM {schema}.update_found(%(run_id)s, %(update_id)s) f;

-- name: update_list
-- The updates of a run, in the order they were requested.
SELECT id, update_id, name, payload, status, result, error, anchor_position, seq,
       created_at, accepted_at, completed_at
FROM {schema}.updates WHERE run_id = %(run_id)s ORDER BY id;

-- name: update_applied
-- The updates a run accepted, with the wait position each was applied at and
-- its order there: what a replay applies again.
SELECT id, update_id, name, payload, status, anchor_position, seq
FROM {schema}.updates
WHERE run_id = %(run_id)s AND status IN ('accepted', 'completed', 'failed')
ORDER BY anchor_position, seq;

-- name: update_requested
-- The requests a run has not decided yet, oldest first.
SELECT id, update_id, name, payload
FROM {schema}.updates WHERE run_id = %(run_id)s AND status = 'requested' ORDER BY id;

-- name: update_reject
-- Refuse a request its validator refused: only the update's own row changes.
UPDATE {schema}.updates
SET status = 'rejected', error = %(error)s::jsonb, completed_at = {now}
WHERE id = %(id)s AND status = 'requested'
RETURNING id;

-- name: update_accept
-- Accept a request at the wait at %(position)s, %(seq)s-th there, and record
-- it in the run's history. Fenced.
WITH lease AS (
    SELECT run_id FROM {schema}.tasks
    WHERE id = %(task_id)s AND worker_id = %(worker_id)s AND attempt = %(attempt)s
      AND status = 'claimed'
), accepted AS (
    UPDATE {schema}.updates u
    SET status = 'accepted', anchor_position = %(position)s, seq = %(seq)s, accepted_at = {now}
    FROM lease
    WHERE u.id = %(id)s AND u.run_id = lease.run_id AND u.status = 'requested'
    RETURNING u.run_id, u.update_id, u.name
), event AS (
    INSERT INTO {schema}.history (run_id, at, event, step_position, step_name, attempt, worker_id,
                                  detail)
    SELECT run_id, {now}, 'update_accepted', %(position)s, 'update:' || name, %(attempt)s,
           %(worker_id)s, jsonb_build_object('update_id', update_id, 'seq', %(seq)s)
    FROM accepted
)
SELECT (SELECT count(*) FROM lease) AS leased, (SELECT count(*) FROM accepted) AS written,
       {now} AS db_now;

-- name: update_reply
-- Store an accepted update's reply (status 'completed' with its result, or
-- 'failed' with its error) and record it in the run's history. Fenced; a
-- reply already stored stays.
WITH lease AS (
    SELECT run_id FROM {schema}.tasks
    WHERE id = %(task_id)s AND worker_id = %(worker_id)s AND attempt = %(attempt)s
      AND status = 'claimed'
), replied AS (
    UPDATE {schema}.updates u
    SET status = %(status)s, result = %(result)s::jsonb, error = %(error)s::jsonb,
        completed_at = {now}
    FROM lease
    WHERE u.id = %(id)s AND u.run_id = lease.run_id AND u.status = 'accepted'
    RETURNING u.run_id, u.update_id, u.name, u.anchor_position
), event AS (
    INSERT INTO {schema}.history (run_id, at, event, step_position, step_name, attempt, worker_id,
                                  detail)
    SELECT run_id, {now}, 'update_' || %(status)s, anchor_position, 'update:' || name,
           %(attempt)s, %(worker_id)s, jsonb_build_object('update_id', update_id)
    FROM replied
)
SELECT (SELECT count(*) FROM lease) AS leased, (SELECT count(*) FROM replied) AS written,
       {now} AS db_now;
