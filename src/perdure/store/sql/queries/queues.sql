-- Named queries on queue settings: the limits task_claim enforces.

-- name: queue_lock
-- Lock the rows of the given queues that have a limit counted across
-- workers (a global concurrency, a partition concurrency or a rate limit), in
-- name order so that two claimers never deadlock, and return their names;
-- `throttled` marks those with a partition or rate limit, which
-- task_claim_throttled claims from. A worker runs this first in its claim
-- transaction and the claims second: under READ COMMITTED a claim then takes
-- its snapshot after the lock was granted, so it counts every task the
-- previous holder claimed. (A lock taken in a CTE of the claim itself would
-- not do: all CTEs share the statement's snapshot.)
SELECT name, (partition_concurrency IS NOT NULL OR rate_limit IS NOT NULL) AS throttled
FROM {schema}.queues
WHERE name = ANY(%(queues)s)
  AND (concurrency IS NOT NULL OR partition_concurrency IS NOT NULL OR rate_limit IS NOT NULL)
ORDER BY name
FOR UPDATE;

-- name: queue_set
-- Record the settings of a queue. Only the settings flagged %(set_...)s are
-- written (set_rate covers rate_limit and rate_period together); the others
-- keep their value (NULL, no limit, for a new row). Returns a row only when
-- something changed, and then wakes the workers so that a raised limit is
-- used at once.
WITH changed AS (
    INSERT INTO {schema}.queues AS q (name, concurrency, worker_concurrency,
                                      partition_concurrency, rate_limit, rate_period,
                                      rate_per_key, created_at, updated_at)
    VALUES (%(name)s, %(concurrency)s, %(worker_concurrency)s, %(partition_concurrency)s,
            %(rate_limit)s, %(rate_period)s, coalesce(%(rate_per_key)s, false), {now}, {now})
    ON CONFLICT (name) DO UPDATE
    SET concurrency = CASE WHEN %(set_concurrency)s THEN EXCLUDED.concurrency
                           ELSE q.concurrency END,
        worker_concurrency = CASE WHEN %(set_worker_concurrency)s THEN EXCLUDED.worker_concurrency
                                  ELSE q.worker_concurrency END,
        partition_concurrency = CASE WHEN %(set_partition_concurrency)s
                                     THEN EXCLUDED.partition_concurrency
                                     ELSE q.partition_concurrency END,
        rate_limit = CASE WHEN %(set_rate)s THEN EXCLUDED.rate_limit ELSE q.rate_limit END,
        rate_period = CASE WHEN %(set_rate)s THEN EXCLUDED.rate_period ELSE q.rate_period END,
        rate_per_key = CASE WHEN %(set_rate_per_key)s THEN EXCLUDED.rate_per_key
                            ELSE q.rate_per_key END,
        updated_at = EXCLUDED.updated_at
    WHERE (q.concurrency, q.worker_concurrency, q.partition_concurrency, q.rate_limit,
           q.rate_period, q.rate_per_key) IS DISTINCT FROM (
        CASE WHEN %(set_concurrency)s THEN EXCLUDED.concurrency ELSE q.concurrency END,
        CASE WHEN %(set_worker_concurrency)s THEN EXCLUDED.worker_concurrency
             ELSE q.worker_concurrency END,
        CASE WHEN %(set_partition_concurrency)s THEN EXCLUDED.partition_concurrency
             ELSE q.partition_concurrency END,
        CASE WHEN %(set_rate)s THEN EXCLUDED.rate_limit ELSE q.rate_limit END,
        CASE WHEN %(set_rate)s THEN EXCLUDED.rate_period ELSE q.rate_period END,
        CASE WHEN %(set_rate_per_key)s THEN EXCLUDED.rate_per_key ELSE q.rate_per_key END)
    RETURNING name
)
SELECT changed.name FROM changed, pg_notify(%(channel)s, changed.name);

-- name: queue_list
-- Every known queue (one with settings, a registered workflow's, or one with
-- tasks) with its limits and its tasks by state: ready (due now: the depth),
-- running (claimed), waiting (due later: sleeps, timeouts, retry backoffs)
-- and paused, and how long the oldest ready task has been due. The tasks
-- table holds only pending and held work, so the counts do not grow with
-- finished runs. %(name)s, when given, selects one queue.
WITH names AS (
    SELECT name FROM {schema}.queues
    UNION SELECT queue FROM {schema}.workflows
    UNION SELECT queue FROM {schema}.tasks
), counts AS (
    SELECT queue,
           count(*) FILTER (WHERE status = 'ready' AND available_at <= {now}) AS ready,
           count(*) FILTER (WHERE status = 'claimed') AS running,
           count(*) FILTER (WHERE status = 'ready' AND available_at > {now}) AS waiting,
           count(*) FILTER (WHERE status = 'paused') AS paused,
           min(available_at) FILTER (WHERE status = 'ready' AND available_at <= {now}) AS oldest
    FROM {schema}.tasks
    GROUP BY queue
)
SELECT n.name, q.concurrency, q.worker_concurrency, q.updated_at,
       coalesce(c.ready, 0) AS ready, coalesce(c.running, 0) AS running,
       coalesce(c.waiting, 0) AS waiting, coalesce(c.paused, 0) AS paused,
       q.partition_concurrency, q.rate_limit, q.rate_period, coalesce(q.rate_per_key, false)
           AS rate_per_key,
       -- A task due at '-infinity' (written by hand) is not "oldest" for ever.
       extract(epoch FROM {now} - nullif(c.oldest, '-infinity'))::float8 AS oldest_seconds
FROM names n
LEFT JOIN {schema}.queues q ON q.name = n.name
LEFT JOIN counts c ON c.queue = n.name
WHERE %(name)s::text IS NULL OR n.name = %(name)s
ORDER BY n.name;

-- name: queue_wake
-- Wake the other workers, for work no trigger announces: a task of a queue
-- limited across workers finished (one of them may claim the next now), or
-- steps wait out a head start that their scheduler cannot run alone (each
-- sets its timer and joins after it). Not at their next poll. The payload
-- names the sender, whose own listener ignores it. Also a call passed on to
-- one worker alone, on its own channel, by a worker too busy to answer it.
SELECT pg_notify(%(channel)s, %(payload)s);
