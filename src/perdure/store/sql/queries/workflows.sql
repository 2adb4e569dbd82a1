-- Named queries on the workflow registry.

-- name: workflow_upsert
-- Record (or refresh) a workflow definition in the registry.
INSERT INTO {schema}.workflows (name, version, queue, kind, definition, fingerprint,
                                max_lapses, registered_at, updated_at)
VALUES (%(name)s, %(version)s, %(queue)s, %(kind)s, %(definition)s::jsonb, %(fingerprint)s,
        %(max_lapses)s, {now}, {now})
ON CONFLICT (name, version) DO UPDATE
SET queue = EXCLUDED.queue, kind = EXCLUDED.kind, definition = EXCLUDED.definition,
    fingerprint = EXCLUDED.fingerprint, max_lapses = EXCLUDED.max_lapses,
    updated_at = EXCLUDED.updated_at;

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
-- Bounded: the counts are those of each workflow's newest %(cap)s runs (all
-- versions together), read by one range scan of runs_workflow_created_at_idx
-- per workflow name; counts_capped says the cap was reached.
WITH recent AS MATERIALIZED (
    SELECT n.name, r.version, r.status, count(*) AS n, sum(count(*)) OVER (PARTITION BY n.name) AS total
    FROM (SELECT DISTINCT name FROM {schema}.workflows) n
    CROSS JOIN LATERAL (SELECT version, status FROM {schema}.runs r
                        WHERE r.workflow = n.name
                        ORDER BY r.created_at DESC
                        LIMIT %(cap)s) r
    GROUP BY n.name, r.version, r.status
)
SELECT w.name, w.version, w.queue, w.kind, w.updated_at, w.definition, w.fingerprint,
       coalesce((SELECT jsonb_object_agg(c.status, c.n) FROM recent c
                 WHERE c.name = w.name AND c.version = w.version), '{}'::jsonb) AS counts,
       coalesce((SELECT max(c.total) >= %(cap)s FROM recent c WHERE c.name = w.name), false)
           AS counts_capped,
       ARRAY(SELECT k.id FROM {schema}.workers k
             WHERE k.status = 'running'
               AND k.heartbeat_at > {now} - make_interval(secs => %(stale_seconds)s)
               AND w.name || '@' || w.version = ANY(k.workflows)
             ORDER BY k.id) AS workers
FROM {schema}.workflows w
ORDER BY w.name, w.version DESC;

-- name: workflow_list_registered
-- Every registered workflow version with its definition, without run counts:
-- what the dashboard's filters and run pages need, at the cost of the
-- registry table alone (workflow_list counts runs too).
SELECT w.name, w.version, w.queue, w.kind, w.updated_at, w.definition, w.fingerprint,
       '{}'::jsonb AS counts
FROM {schema}.workflows w
ORDER BY w.name, w.version DESC;
