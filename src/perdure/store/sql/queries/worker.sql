-- Named queries on workers and the workflow registry.

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

-- name: workflow_upsert
-- Record (or refresh) a workflow definition in the registry.
INSERT INTO {schema}.workflows (name, version, queue, kind, definition, fingerprint,
                                registered_at, updated_at)
VALUES (%(name)s, %(version)s, %(queue)s, %(kind)s, %(definition)s::jsonb, %(fingerprint)s,
        {now}, {now})
ON CONFLICT (name, version) DO UPDATE
SET queue = EXCLUDED.queue, kind = EXCLUDED.kind, definition = EXCLUDED.definition,
    fingerprint = EXCLUDED.fingerprint, updated_at = EXCLUDED.updated_at;

-- name: workflow_lookup
-- The registered definition of a workflow: the given version, or the newest.
SELECT name, version, queue, kind, definition
FROM {schema}.workflows
WHERE name = %(name)s AND (%(version)s::integer IS NULL OR version = %(version)s)
ORDER BY version DESC
LIMIT 1;

-- name: workflow_list
-- Every registered workflow version with run counts by status and the live
-- workers that have its code (a worker records "name@version" for each
-- version it serves): a version no live worker has gets no run claimed.
-- Live: status 'running' with a heartbeat in the last %(stale_seconds)s.
SELECT w.name, w.version, w.queue, w.kind, w.updated_at, w.definition, w.fingerprint,
       coalesce((SELECT jsonb_object_agg(c.status, c.n)
                 FROM (SELECT status, count(*) AS n FROM {schema}.runs r
                       WHERE r.workflow = w.name AND r.version = w.version
                       GROUP BY status) c), '{}'::jsonb) AS counts,
       ARRAY(SELECT k.id FROM {schema}.workers k
             WHERE k.status = 'running'
               AND k.heartbeat_at > {now} - make_interval(secs => %(stale_seconds)s)
               AND w.name || '@' || w.version = ANY(k.workflows)
             ORDER BY k.id) AS workers
FROM {schema}.workflows w
ORDER BY w.name, w.version DESC;

-- name: history_list
-- The history of one run, oldest first.
SELECT id, at, event, step_position, step_name, attempt, worker_id, detail, duration
FROM {schema}.history
WHERE run_id = %(run_id)s
ORDER BY id;
