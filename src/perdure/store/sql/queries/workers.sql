-- Named queries on workers, and the lock that lets one maintainer at a time
-- work (see docs/operating.md).

-- name: worker_register
-- Announce a worker: what it serves and how much it can hold.
INSERT INTO {schema}.workers (id, host, pid, queues, workflows, concurrency, status, started_at,
                              heartbeat_at, schema_version, release)
VALUES (%(worker_id)s, %(host)s, %(pid)s, %(queues)s, %(workflows)s, %(concurrency)s, 'running',
        {now}, {now}, %(schema_version)s, %(release)s)
ON CONFLICT (id) DO UPDATE
SET host = EXCLUDED.host, pid = EXCLUDED.pid, queues = EXCLUDED.queues,
    workflows = EXCLUDED.workflows, concurrency = EXCLUDED.concurrency, status = 'running',
    heartbeat_at = EXCLUDED.heartbeat_at, stopped_at = NULL,
    schema_version = EXCLUDED.schema_version, release = EXCLUDED.release;

-- name: worker_stop
-- Mark a worker stopped after a graceful shutdown.
UPDATE {schema}.workers SET status = 'stopped', stopped_at = {now} WHERE id = %(worker_id)s;

-- name: worker_beat
-- Mark this worker alive, and tell it its rank: how many live workers (a
-- heartbeat within %(fresh_seconds)s) have a smaller id. Rank 0 holds the
-- fleet's duties (the reaper, the schedule ticker); a worker that dies or
-- freezes stops beating, and the next one takes over. queue_ranks is the
-- same count for each queue it serves, among the workers serving that
-- queue: rank 0 answers the queue's notifications first. %(listening)s is
-- whether the worker LISTENs on its own channel until its next beat
-- (worker_next passes calls on only to those that do).
WITH alive AS (
    UPDATE {schema}.workers
    SET heartbeat_at = {now}, status = 'running', listening = %(listening)s
    WHERE id = %(worker_id)s
    RETURNING id, queues
), live AS (
    SELECT queues FROM {schema}.workers
    WHERE status = 'running' AND id < %(worker_id)s
      AND heartbeat_at > {now} - make_interval(secs => %(fresh_seconds)s)
)
SELECT (SELECT count(*) FROM live) AS rank,
       (SELECT coalesce(jsonb_object_agg(q, (SELECT count(*) FROM live WHERE q = ANY(live.queues))),
                        '{}'::jsonb)
        FROM alive, unnest(alive.queues) AS q) AS queue_ranks;

-- name: worker_next
-- The next live worker (by id) after %(worker_id)s serving one of %(queues)s:
-- the one a worker too busy to answer a call passes it on to. Only a worker
-- that LISTENs on its own channel (its row says so) can hear it.
SELECT min(id) AS next FROM {schema}.workers
WHERE status = 'running' AND listening AND id > %(worker_id)s AND queues && %(queues)s::text[]
  AND heartbeat_at > {now} - make_interval(secs => %(fresh_seconds)s);

-- name: worker_mark_lost
-- Workers whose heartbeat is older than %(stale_seconds)s are marked lost, so
-- listings tell a dead worker from a live one.
UPDATE {schema}.workers SET status = 'lost'
WHERE status = 'running' AND heartbeat_at < {now} - make_interval(secs => %(stale_seconds)s);

-- name: worker_list
-- Every worker, most recently seen first.
SELECT w.*,
       (SELECT count(*) FROM {schema}.tasks t WHERE t.worker_id = w.id AND t.status = 'claimed')
           AS held
FROM {schema}.workers w
ORDER BY w.heartbeat_at DESC
LIMIT %(limit)s;

-- name: worker_maintenance_lock
-- Try to become this schema's maintainer (retention, history partitions):
-- a session advisory lock, held by the connection that runs the pass and
-- released by worker_maintenance_unlock or when the connection ends (a dead worker).
SELECT pg_try_advisory_lock(hashtext('perdure.maintenance:' || %(schema)s)) AS locked;

-- name: worker_maintenance_unlock
-- Stop being this schema's maintainer.
SELECT pg_advisory_unlock(hashtext('perdure.maintenance:' || %(schema)s)) AS unlocked;

-- name: worker_report_stuck
-- How many of a worker's threads run a step nobody waits for any more.
UPDATE {schema}.workers SET stuck_threads = %(stuck)s WHERE id = %(worker_id)s;

-- name: worker_server_connections
-- What the server allows and what is in use, for a worker's check at start
-- that its connections fit: max_connections, those reserved for superusers,
-- the client connections open now, and those of the worker named %(name)s.
SELECT current_setting('max_connections')::int AS allowed,
       current_setting('superuser_reserved_connections')::int AS reserved,
       (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend') AS used,
       (SELECT count(*) FROM pg_stat_activity
        WHERE application_name LIKE %(name)s || '%%') AS own;
