-- Named queries for queues with a partition or rate limit ("throttled"
-- queues). Queues without those settings never reach these statements: they
-- keep the plain task_claim path, so the limits cost nothing where unused.

-- name: task_claim_throttled
-- Claim up to %(limit)s ready tasks of the given throttled queues, within
-- every limit they have: global concurrency, per-worker concurrency,
-- partition concurrency (claimed tasks per partition key) and the rate limit
-- (claims per period, for the queue or per key). The caller holds the rows
-- of these queues locked (queue_lock, earlier in the same transaction), so
-- the counts below include every claim made before this one, by any worker.
-- Tasks without a partition key count as one partition, the key ''.
WITH clock AS (
    -- The moment of the claim, after the lock wait: the rate window is
    -- measured on it rather than on the transaction's start. A CTE with a
    -- volatile function is evaluated once.
    SELECT coalesce(%(now)s::timestamptz, clock_timestamp()) AS at
), settings AS (
    SELECT q.name, q.partition_concurrency, q.rate_limit, q.rate_per_key,
           least(q.concurrency - held.running, q.worker_concurrency - held.mine) AS free,
           (SELECT at FROM clock) - make_interval(secs => q.rate_period) AS window_start
    FROM {schema}.queues q
    CROSS JOIN LATERAL (
        SELECT count(*) AS running,
               count(*) FILTER (WHERE t.worker_id = %(worker_id)s) AS mine
        FROM {schema}.tasks t
        WHERE t.status = 'claimed' AND t.queue = q.name
    ) held
    WHERE q.name = ANY(%(queues)s)
), recent AS (
    -- Claims inside each rate window: per key, or under the key '' for the
    -- whole queue. The window holds at most rate_limit rows per bucket.
    SELECT s.queue, s.partition_key AS key, count(*) AS n
    FROM {schema}.queue_starts s JOIN settings q ON q.name = s.queue
    WHERE s.started_at > q.window_start
    GROUP BY s.queue, s.partition_key
), queue_free AS (
    -- Free slots of each queue as a whole (NULL: no limit): the concurrency
    -- limits, and the rate budget left when the rate is for the whole queue.
    SELECT q.name,
           least(q.free, CASE WHEN q.rate_limit IS NOT NULL AND NOT q.rate_per_key
                              THEN q.rate_limit - coalesce(r.n, 0) END) AS free
    FROM settings q LEFT JOIN recent r ON r.queue = q.name AND r.key = ''
), key_free AS (
    -- Free slots of each key that has something counted against it; a key
    -- with nothing counted has the whole allowance (key_allowance below).
    SELECT queue, key, min(free) AS free
    FROM (
        SELECT t.queue, coalesce(t.partition_key, '') AS key,
               min(q.partition_concurrency) - count(*) AS free
        FROM {schema}.tasks t JOIN settings q ON q.name = t.queue
        WHERE t.status = 'claimed' AND q.partition_concurrency IS NOT NULL
        GROUP BY t.queue, coalesce(t.partition_key, '')
        UNION ALL
        SELECT r.queue, r.key, q.rate_limit - r.n
        FROM recent r JOIN settings q ON q.name = r.queue
        WHERE q.rate_per_key
    ) counted
    GROUP BY queue, key
), ready AS (
    SELECT t.id, t.queue, coalesce(t.partition_key, '') AS key, t.priority, t.available_at
    FROM {schema}.tasks t
    WHERE t.status = 'ready'
      AND t.queue = ANY(%(queues)s)
      AND t.available_at <= (SELECT at FROM clock)
      AND (t.workflow, t.version) IN (SELECT * FROM unnest(%(names)s::text[],
                                                           %(versions)s::integer[]))
      -- A full queue is not read at all; the tasks of a key at its limit are
      -- passed over, so that a key with a backlog does not hide the others.
      AND t.queue NOT IN (SELECT name FROM queue_free WHERE free <= 0)
      AND (t.queue, coalesce(t.partition_key, '')) NOT IN (
          SELECT queue, key FROM key_free WHERE free <= 0)
    ORDER BY t.priority DESC, t.available_at, t.id
    LIMIT %(limit)s * 4
    FOR UPDATE SKIP LOCKED
), per_key AS (
    -- At most each key's free slots, first in claim order; `turn` is the
    -- task's place in its key's line.
    SELECT r.*
    FROM (SELECT r.*, row_number() OVER (PARTITION BY r.queue, r.key
                                         ORDER BY r.priority DESC, r.available_at, r.id) AS turn
          FROM ready r) r
    JOIN settings q ON q.name = r.queue
    LEFT JOIN key_free k ON k.queue = r.queue AND k.key = r.key
    WHERE r.turn <= coalesce(
        k.free,
        least(q.partition_concurrency, CASE WHEN q.rate_per_key THEN q.rate_limit END),
        r.turn)
), candidates AS (
    -- Then at most each queue's free slots. Within a priority the keys take
    -- turns (every key's first task before any key's second), which is what
    -- makes the claim fair across keys; within a key it is first in, first out.
    SELECT p.id
    FROM (SELECT p.*, row_number() OVER (PARTITION BY p.queue
                                         ORDER BY p.priority DESC, p.turn, p.available_at, p.id)
                          AS nth
          FROM per_key p) p
    LEFT JOIN queue_free f ON f.name = p.queue
    WHERE f.free IS NULL OR p.nth <= f.free
    ORDER BY p.priority DESC, p.turn, p.available_at, p.id
    LIMIT %(limit)s
), claimed AS (
    UPDATE {schema}.tasks t
    SET status = 'claimed', worker_id = %(worker_id)s, attempt = t.attempt + 1,
        claimed_at = clock.at, lease_expires_at = clock.at + make_interval(secs => %(lease_seconds)s),
        wait_signal = NULL
    FROM candidates c, clock
    WHERE t.id = c.id
    RETURNING t.id, t.run_id, t.kind, t.step_position, t.step_name, t.gather_start, t.attempt,
              t.failures, t.lapses, t.workflow, t.version, t.queue, t.partition_key
), counted AS (
    -- Every claim from a rate-limited queue is one start in its window.
    INSERT INTO {schema}.queue_starts (queue, partition_key, started_at)
    SELECT c.queue, CASE WHEN q.rate_per_key THEN coalesce(c.partition_key, '') ELSE '' END,
           (SELECT at FROM clock)
    FROM claimed c JOIN settings q ON q.name = c.queue
    WHERE q.rate_limit IS NOT NULL
), expired AS (
    -- Starts older than their window count no more; a queue whose rate
    -- limit was removed drops them all. Bounded: at most the limit per bucket.
    DELETE FROM {schema}.queue_starts s
    USING settings q
    WHERE s.queue = q.name AND (q.window_start IS NULL OR s.started_at <= q.window_start)
), started AS (
    -- As in task_claim: claiming a run's own task starts the run, unless it
    -- was cancelled, paused or finished meanwhile.
    UPDATE {schema}.runs r
    SET status = CASE WHEN r.status = 'compensating' THEN r.status ELSE 'running' END,
        started_at = coalesce(r.started_at, clock.at), waiting_for = NULL,
        worker_id = %(worker_id)s, updated_at = clock.at
    FROM claimed c, clock
    WHERE r.id = c.run_id AND c.kind = 'run'
      AND r.status NOT IN ('completed', 'failed', 'cancelled', 'compensated',
                           'compensation_failed', 'paused')
    RETURNING r.id, r.input
), event AS (
    INSERT INTO {schema}.history (run_id, at, event, step_position, step_name, attempt, worker_id)
    SELECT run_id, (SELECT at FROM clock),
           CASE WHEN kind = 'run' THEN 'run_claimed' ELSE 'step_claimed' END,
           step_position, step_name, attempt, %(worker_id)s
    FROM claimed
)
SELECT c.*, coalesce(s.input, r.input) AS input, r.status AS run_status,
       CASE WHEN c.kind = 'run' THEN s.id IS NULL
            ELSE r.status IN ('completed', 'failed', 'cancelled', 'compensated',
                              'compensation_failed', 'paused') END AS finished,
       (SELECT at FROM clock) AS db_now
FROM claimed c JOIN {schema}.runs r ON r.id = c.run_id LEFT JOIN started s ON s.id = c.run_id;

-- name: task_next_due_throttled
-- Seconds until something may be claimable in these throttled queues without
-- a notification: the earliest ready task due later, or the moment the
-- oldest claim in a rate window leaves it (NULL if neither). Only future
-- moments count: a task due now behind a full key or an empty rate budget
-- must not make the worker spin; a slot that frees on this worker wakes it,
-- one that frees elsewhere is found by the poll.
SELECT extract(epoch FROM least(
    -- Each queue's first future task, from tasks_due_idx (queue, available_at).
    (SELECT min(next.available_at)
     FROM (SELECT DISTINCT unnest(%(queues)s::text[])) AS served(name)
     CROSS JOIN LATERAL (
         SELECT available_at FROM {schema}.tasks
         WHERE status = 'ready' AND queue = served.name AND available_at > {now}
           AND (workflow, version) IN (SELECT * FROM unnest(%(names)s::text[],
                                                            %(versions)s::integer[]))
         ORDER BY available_at
         LIMIT 1
     ) next),
    (SELECT min(s.started_at + make_interval(secs => q.rate_period))
     FROM {schema}.queue_starts s JOIN {schema}.queues q ON q.name = s.queue
     WHERE s.queue = ANY(%(queues)s)
       AND s.started_at + make_interval(secs => q.rate_period) > {now})
) - {now})::float8 AS seconds;
