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

-- name: workflow_stranded
-- The workflow versions with unfinished runs that no live worker can claim:
-- no worker that is running, with a heartbeat in the last %(stale_seconds)s,
-- has the version's code ("name@version" in its workflows) on the run's queue.
-- One row per (workflow, version): how many runs wait, on which queues, and
-- the versions of that workflow live workers do serve (what to move them to).
WITH open AS (
    SELECT r.workflow, r.version, r.queue, count(*) AS runs
    FROM {schema}.runs r
    WHERE r.status IN ('queued', 'running', 'waiting', 'paused', 'compensating')
    GROUP BY r.workflow, r.version, r.queue
), live AS (
    SELECT k.queues, k.workflows FROM {schema}.workers k
    WHERE k.status = 'running'
      AND k.heartbeat_at > {now} - make_interval(secs => %(stale_seconds)s)
)
SELECT o.workflow, o.version, sum(o.runs)::bigint AS runs,
       array_agg(o.queue ORDER BY o.queue) AS queues,
       ARRAY(SELECT DISTINCT substr(w, length(o.workflow) + 2)::integer
             FROM live, unnest(live.workflows) AS w
             WHERE left(w, length(o.workflow) + 1) = o.workflow || '@'
               AND substr(w, length(o.workflow) + 2) ~ '^[0-9]+$'
               AND length(w) - length(o.workflow) <= 10
             ORDER BY 1) AS served
FROM open o
WHERE NOT EXISTS (SELECT 1 FROM live
                  WHERE o.workflow || '@' || o.version = ANY(live.workflows)
                    AND o.queue = ANY(live.queues))
GROUP BY o.workflow, o.version
ORDER BY o.workflow, o.version;

-- name: workflow_move_runs
-- Move the given runs of %(workflow)s version %(from_version)s to
-- %(to_version)s (app.move_runs): only runs in %(statuses)s that have
-- recorded nothing (no row in steps: no step, sleep, wait or event) and that
-- no worker holds. Their run and task rows are locked in id order first, so
-- no worker claims one while it moves. Each given run that matched comes back
-- with why it stays (recorded, held) or moved; with %(dry_run)s nothing
-- changes. 'run_version_moved' is recorded in each moved run's history.
WITH picked AS (
    SELECT r.id, r.status
    FROM {schema}.runs r
    WHERE r.id = ANY(%(ids)s::uuid[]) AND r.workflow = %(workflow)s
      AND r.version = %(from_version)s AND r.status = ANY(%(statuses)s::text[])
    ORDER BY r.id
    FOR UPDATE OF r
), locked_tasks AS (
    SELECT t.run_id, t.status FROM {schema}.tasks t
    WHERE t.run_id IN (SELECT id FROM picked)
    ORDER BY t.id
    FOR UPDATE OF t
), judged AS (
    SELECT p.id, p.status,
           EXISTS (SELECT 1 FROM {schema}.steps s WHERE s.run_id = p.id) AS recorded,
           EXISTS (SELECT 1 FROM locked_tasks t WHERE t.run_id = p.id AND t.status = 'claimed')
               AS held
    FROM picked p
), moved AS (
    UPDATE {schema}.runs r SET version = %(to_version)s, updated_at = {now}
    FROM judged j
    WHERE r.id = j.id AND NOT j.recorded AND NOT j.held AND NOT %(dry_run)s
    RETURNING r.id
), moved_tasks AS (
    -- available_at is set (to itself) so the ready-task trigger wakes the
    -- workers that serve the new version at once.
    UPDATE {schema}.tasks t SET version = %(to_version)s, available_at = t.available_at
    WHERE t.run_id IN (SELECT id FROM moved)
    RETURNING t.id
), noted AS (
    INSERT INTO {schema}.history (run_id, at, event, detail)
    SELECT id, {now}, 'run_version_moved',
           jsonb_build_object('from', %(from_version)s::integer, 'to', %(to_version)s::integer)
    FROM moved
    RETURNING run_id
)
SELECT j.id, j.status, j.recorded, j.held,
       (NOT j.recorded AND NOT j.held) AS movable,
       (SELECT count(*) FROM moved_tasks) + (SELECT count(*) FROM noted) AS written
FROM judged j
ORDER BY j.id;
