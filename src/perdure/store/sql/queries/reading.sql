-- Named queries of the observability reads: the dashboard's counts,
-- overview chart, workers and queues (its runs list is run_list, run.sql).
-- Every filter is skipped when its parameter is NULL.

-- name: run_count_by_status
-- How many runs match a RunFilter (app.count_runs: the criteria of run_list
-- but the status), per status, each count stopping at %(cap)s: every status
-- is counted by its own bounded scan of the (status, created_at) index, so
-- the page costs the same with a million finished runs behind it (a count at
-- the cap reads "cap or more"). count_runs sends a narrowing filter
-- (RunFilter.narrowing) to run_count_recent instead.
SELECT s.status,
       (SELECT count(*) FROM (
            SELECT 1 FROM {schema}.runs r
            WHERE r.status = s.status
              AND (%(workflow)s::text IS NULL OR r.workflow = %(workflow)s)
              AND (%(version)s::integer IS NULL OR r.version = %(version)s)
              AND (%(queue)s::text IS NULL OR r.queue = %(queue)s)
              AND (%(worker)s::text IS NULL OR r.worker_id = %(worker)s)
              AND (%(key_prefix)s::text IS NULL OR starts_with(r.key, %(key_prefix)s))
              AND (%(since)s::timestamptz IS NULL OR r.created_at >= %(since)s)
              AND (%(before)s::timestamptz IS NULL OR r.created_at < %(before)s)
              AND (%(parent)s::uuid IS NULL OR r.parent_run_id = %(parent)s::uuid)
              AND (%(tags)s::jsonb IS NULL OR r.tags @> %(tags)s::jsonb)
              AND (%(ids)s::uuid[] IS NULL OR r.id = ANY(%(ids)s::uuid[]))
            LIMIT %(cap)s) capped) AS n
FROM unnest(%(statuses)s::text[]) AS s(status);

-- name: run_count_recent
-- How many of the newest %(cap)s runs matching a workflow, version, queue,
-- worker, key, parent, tags or run ids filter are in each status. One
-- ordered scan of the index that serves the filter ((workflow, created_at),
-- (worker_id, created_at), parent_run_id, tags, or created_at), stopped at
-- %(cap)s rows: a per-status count of a narrow filter would walk the status
-- index past every run that does not match.
SELECT newest.status, count(*) AS n
FROM (SELECT r.status
      FROM {schema}.runs r
      WHERE (%(workflow)s::text IS NULL OR r.workflow = %(workflow)s)
        AND (%(version)s::integer IS NULL OR r.version = %(version)s)
        AND (%(queue)s::text IS NULL OR r.queue = %(queue)s)
        AND (%(worker)s::text IS NULL OR r.worker_id = %(worker)s)
        AND (%(key_prefix)s::text IS NULL OR starts_with(r.key, %(key_prefix)s))
        AND (%(since)s::timestamptz IS NULL OR r.created_at >= %(since)s)
        AND (%(before)s::timestamptz IS NULL OR r.created_at < %(before)s)
        AND (%(parent)s::uuid IS NULL OR r.parent_run_id = %(parent)s::uuid)
        AND (%(tags)s::jsonb IS NULL OR r.tags @> %(tags)s::jsonb)
        AND (%(ids)s::uuid[] IS NULL OR r.id = ANY(%(ids)s::uuid[]))
      ORDER BY r.created_at DESC
      LIMIT %(cap)s) newest
GROUP BY newest.status;

-- name: run_activity
-- Runs created since %(since)s, counted per time bucket of
-- %(bucket_seconds)s and per status (what they became): the overview's chart.
-- A range scan of runs_created_at_idx, bounded by the window.
SELECT date_bin(make_interval(secs => %(bucket_seconds)s::float8), r.created_at,
                %(since)s::timestamptz) AS bucket,
       r.status, count(*) AS n
FROM {schema}.runs r
WHERE r.created_at >= %(since)s::timestamptz
GROUP BY 1, 2
ORDER BY 1, 2;

-- name: task_list_claimed
-- The tasks workers hold now, by worker: what each one is working on. The
-- tasks table holds only pending and held work; tasks_claimed_idx holds
-- exactly these rows.
SELECT t.worker_id, t.run_id::text AS run_id, t.kind, t.workflow, t.version, t.step_name,
       t.attempt, t.claimed_at, t.lease_expires_at
FROM {schema}.tasks t
WHERE t.status = 'claimed'
ORDER BY t.worker_id, t.claimed_at
LIMIT %(limit)s;

-- name: event_list
-- The events a run published (ctx.set_event), latest value of each key.
SELECT key, value, position, updated_at
FROM {schema}.events
WHERE run_id = %(run_id)s
ORDER BY position;

-- name: workflow_list_registered
-- Every registered workflow version with its definition, without run counts:
-- what the dashboard's filters and run pages need, at the cost of the
-- registry table alone (workflow_list counts runs too).
SELECT w.name, w.version, w.queue, w.kind, w.updated_at, w.definition, w.fingerprint,
       '{}'::jsonb AS counts
FROM {schema}.workflows w
ORDER BY w.name, w.version DESC;
