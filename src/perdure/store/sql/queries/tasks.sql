-- Named queries on tasks: claim (plain and throttled), heartbeat, release,
-- reap. Queues with a partition or rate limit ("throttled") use the
-- _throttled claims; the others never reach them, so unused limits cost nothing.

-- name: task_claim
-- Claim up to %(limit)s ready tasks of the given queues and workflow versions.
-- SKIP LOCKED lets many workers claim at once without waiting on each other;
-- the partial index tasks_ready_idx holds only ready rows, so the cost does
-- not grow with finished work. Bumping attempt makes it the fencing token of
-- this claim. The run turns 'running' and the claim is logged, in the same
-- statement. Checkpoints are read by the caller in a separate statement: this
-- statement's snapshot may predate the last checkpoint of a task released a
-- moment ago by another worker.
-- Queue limits: a queue with a global limit (queues.concurrency) is claimed
-- from only when the caller holds its row lock (queue_lock, earlier in the
-- same transaction; %(locked)s names those queues). A queue without settings
-- costs nothing here: `capacity` is empty and the claim is the plain one.
WITH capacity AS (
    -- Free slots of each served queue that has a limit: the global limit less
    -- the queue's claimed tasks, the per-worker limit less this worker's. A
    -- global limit whose lock the caller does not hold leaves no slot, so a
    -- limit set a moment ago holds even for a worker that has not seen it.
    -- Claimed tasks are few (at most the workers' concurrency), so counting
    -- them through tasks_claimed_idx is cheap.
    -- A queue with a partition or rate limit gives no slot here either: its
    -- tasks are claimed by task_claim_throttled only (a worker that has not
    -- seen such a limit yet finds its tasks due and looks under the locks).
    SELECT q.name,
           least(CASE WHEN q.concurrency IS NULL THEN NULL
                      WHEN q.name = ANY(%(locked)s) THEN q.concurrency - held.running
                      ELSE 0 END,
                 q.worker_concurrency - held.mine,
                 CASE WHEN q.partition_concurrency IS NOT NULL OR q.rate_limit IS NOT NULL
                      THEN 0 END) AS free
    FROM {schema}.queues q
    CROSS JOIN LATERAL (
        SELECT count(*) AS running,
               count(*) FILTER (WHERE t.worker_id = %(worker_id)s) AS mine
        FROM {schema}.tasks t
        WHERE t.status = 'claimed' AND t.queue = q.name
    ) held
    WHERE q.name = ANY(%(queues)s)
      AND (q.concurrency IS NOT NULL OR q.worker_concurrency IS NOT NULL
           OR q.partition_concurrency IS NOT NULL OR q.rate_limit IS NOT NULL)
), ready AS (
    -- Each served queue is read on its own, in claim order, through the
    -- partial index tasks_ready_idx (queue, priority DESC, available_at, id):
    -- the scan stops at the first tasks it can lock, so a claim costs the
    -- same with ten ready tasks or a million. A queue with no free slot is
    -- not read at all. A limited queue's tasks past its free slots are locked
    -- here but not claimed; the margin keeps them from crowding out other
    -- queues' tasks.
    SELECT t.id, t.queue, t.priority, t.available_at
    FROM (SELECT DISTINCT unnest(%(queues)s::text[])) AS served(name)
    CROSS JOIN LATERAL (
        SELECT id, queue, priority, available_at
        FROM {schema}.tasks
        WHERE status = 'ready'
          AND queue = served.name
          AND available_at <= {now}
          -- Only the workflow versions this worker has code for; the rest
          -- wait, visible, for a worker that has them.
          AND (workflow, version) IN (SELECT * FROM unnest(%(names)s::text[],
                                                           %(versions)s::integer[]))
        ORDER BY priority DESC, available_at, id
        LIMIT %(limit)s * (1 + (SELECT count(*) FROM capacity))
        FOR UPDATE SKIP LOCKED
    ) t
    WHERE served.name NOT IN (SELECT name FROM capacity WHERE free <= 0)
), candidates AS (
    -- At most `free` tasks of each limited queue, the first in claim order.
    SELECT r.id
    FROM (SELECT *, row_number() OVER (PARTITION BY queue
                                       ORDER BY priority DESC, available_at, id) AS nth
          FROM ready) r
    LEFT JOIN capacity c ON c.name = r.queue
    WHERE c.free IS NULL OR r.nth <= c.free
    ORDER BY r.priority DESC, r.available_at, r.id
    LIMIT %(limit)s
), claimed AS (
    UPDATE {schema}.tasks t
    SET status = 'claimed', worker_id = %(worker_id)s, attempt = t.attempt + 1,
        claimed_at = {now}, lease_expires_at = {now} + make_interval(secs => %(lease_seconds)s),
        wait_signal = NULL
    FROM candidates c
    WHERE t.id = c.id
    RETURNING t.id, t.run_id, t.kind, t.step_position, t.step_name, t.gather_start, t.attempt,
              t.failures, t.lapses, t.workflow, t.version, t.queue
), started AS (
    -- Claiming a run's own task (kind 'run') starts the run; a parallel
    -- step's task leaves the run's status to the run. A run cancelled,
    -- paused or finished while its task was being claimed is not started:
    -- the claimer gets it back with finished = true and lets go. A run
    -- running its compensations stays 'compensating'.
    UPDATE {schema}.runs r
    SET status = CASE WHEN r.status = 'compensating' THEN r.status ELSE 'running' END,
        started_at = coalesce(r.started_at, {now}), waiting_for = NULL,
        worker_id = %(worker_id)s, updated_at = {now}
    FROM claimed c
    WHERE r.id = c.run_id AND c.kind = 'run'
      AND r.status NOT IN ('completed', 'failed', 'cancelled', 'compensated',
                           'compensation_failed', 'paused')
    -- The input as this update found it: a debounced start (run_debounce)
    -- that committed while this statement waited for the row is included.
    RETURNING r.id, r.input
), event AS (
    INSERT INTO {schema}.history (run_id, at, event, step_position, step_name, attempt, worker_id)
    SELECT run_id, {now}, CASE WHEN kind = 'run' THEN 'run_claimed' ELSE 'step_claimed' END,
           step_position, step_name, attempt, %(worker_id)s
    FROM claimed
)
SELECT c.*, coalesce(s.input, r.input) AS input, r.status AS run_status, r.schedule, r.scheduled_at,
       r.trace_context,
       CASE WHEN c.kind = 'run' THEN s.id IS NULL
            ELSE r.status IN ('completed', 'failed', 'cancelled', 'compensated',
                              'compensation_failed', 'paused') END AS finished,
       {now} AS db_now
FROM claimed c JOIN {schema}.runs r ON r.id = c.run_id LEFT JOIN started s ON s.id = c.run_id;

-- name: task_next_due
-- Seconds until the earliest ready task of these queues becomes due (NULL if
-- none): the idle worker sleeps exactly that long instead of polling. Each
-- queue's first task of a version this worker has is read from
-- tasks_due_idx (queue, available_at), so the answer costs the same with a
-- million runs asleep. A queue at its limit (global, or this worker's) is left
-- out, or a worker would spin on work it may not claim: a slot freed on this
-- worker wakes it, one freed elsewhere is found by that worker's next claim
-- or by the poll. The epochs are subtracted, not the times: a task due at
-- 'infinity' (written by hand) gives Infinity seconds rather than an error.
SELECT (extract(epoch FROM min(next.available_at)) - extract(epoch FROM {now}))::float8 AS seconds
FROM (SELECT DISTINCT unnest(%(queues)s::text[])) AS served(name)
CROSS JOIN LATERAL (
    SELECT available_at FROM {schema}.tasks
    WHERE status = 'ready' AND queue = served.name
      AND (workflow, version) IN (SELECT * FROM unnest(%(names)s::text[], %(versions)s::integer[]))
    ORDER BY available_at
    LIMIT 1
) next
WHERE served.name NOT IN (
    SELECT q.name FROM {schema}.queues q
    WHERE q.name = ANY(%(queues)s)
      AND (q.concurrency <= (SELECT count(*) FROM {schema}.tasks c
                             WHERE c.status = 'claimed' AND c.queue = q.name)
           OR q.worker_concurrency <= (SELECT count(*) FROM {schema}.tasks c
                                       WHERE c.status = 'claimed' AND c.queue = q.name
                                         AND c.worker_id = %(worker_id)s)));

-- name: task_waiting_summary
-- How many tasks of these queues wait for a future time (sleeps, signal
-- timeouts, retry backoffs) and when the next one is due: what
-- `perdure worker` reports. Served by the partial index of ready tasks. A
-- task parked until something happens (a gather, a child run, a signal with
-- no timeout) is due a century ahead (FOREVER_SECONDS in engine/waits.py): it
-- waits, but its due time is no wake-up, so only times within 50 years count.
SELECT count(*) AS waiting,
       min(available_at) FILTER (WHERE available_at < {now} + interval '50 years') AS next_wake
FROM {schema}.tasks
WHERE status = 'ready' AND queue = ANY(%(queues)s) AND available_at > {now};

-- name: task_heartbeat
-- Extend the leases of the tasks this worker is executing and mark it alive.
-- Returns the ids taken away: rows that still exist but this worker no
-- longer holds (they lapsed, or were handed to another worker). A row gone
-- was ended, by its execution or with its run: it is not reported.
-- Only the ids the worker names are extended: a task it claimed but no longer
-- executes (the execution died on a database error, or the claim's answer was
-- lost with its connection) must lapse, not be held for as long as the worker
-- lives. A task row locked right now is skipped, not waited for: it is in a
-- checkpoint of this worker's (which extends the lease itself) or in the
-- reaper's hands. Rows are locked in id order, as the group commit locks
-- them, so that the two never wait for each other in a cycle.
WITH alive AS (
    UPDATE {schema}.workers SET heartbeat_at = {now}, status = 'running'
    WHERE id = %(worker_id)s
    RETURNING id
), held AS (
    SELECT id FROM {schema}.tasks
    WHERE id = ANY(%(task_ids)s) AND worker_id = %(worker_id)s AND status = 'claimed'
), free AS (
    SELECT id FROM {schema}.tasks WHERE id IN (SELECT id FROM held)
    ORDER BY id
    FOR UPDATE SKIP LOCKED
), extended AS (
    UPDATE {schema}.tasks
    SET lease_expires_at = {now} + make_interval(secs => %(lease_seconds)s)
    WHERE id IN (SELECT id FROM free) AND worker_id = %(worker_id)s AND status = 'claimed'
)
SELECT id FROM {schema}.tasks
WHERE id = ANY(%(task_ids)s) AND id NOT IN (SELECT id FROM held);

-- name: task_release
-- Give held tasks back, one input row per task, each fenced on its own
-- (worker_id, attempt) (a single release is a batch of one): due after its
-- delay, with the body's failure counted when failed, parked when paused.
-- Used for workflow retries with backoff, waits that hand the task back,
-- stale histories and a graceful shutdown. The answer has one row per
-- input, in order: changed is 1 when the task was released.
WITH input AS (
    SELECT * FROM unnest(%(task_ids)s::bigint[], %(worker_ids)s::text[], %(attempts)s::integer[],
                         %(delays)s::float8[], %(failed)s::boolean[], %(paused)s::boolean[],
                         %(events)s::text[], %(details)s::jsonb[])
        WITH ORDINALITY AS i(task_id, worker_id, attempt, delay_seconds, failed, paused, event,
                             detail, n)
), released AS (
    UPDATE {schema}.tasks t
    SET status = CASE WHEN i.paused THEN 'paused' ELSE 'ready' END, worker_id = NULL,
        lease_expires_at = NULL, claimed_at = NULL,
        available_at = {now} + make_interval(secs => i.delay_seconds),
        failures = t.failures + CASE WHEN i.failed THEN 1 ELSE 0 END
    FROM input i
    WHERE t.id = i.task_id AND t.worker_id = i.worker_id AND t.attempt = i.attempt
      AND t.status = 'claimed'
    RETURNING t.id AS task_id, t.run_id, t.kind, t.available_at, i.attempt, i.worker_id,
              i.event, i.detail
), queued AS (
    UPDATE {schema}.runs r SET status = 'queued', updated_at = {now}
    FROM released WHERE r.id = released.run_id AND released.kind = 'run' AND r.status = 'running'
), event AS (
    INSERT INTO {schema}.history (run_id, at, event, attempt, worker_id, detail)
    SELECT run_id, {now}, event, attempt, worker_id,
           jsonb_build_object('available_at', available_at) || coalesce(detail, '{}')
    FROM released
)
SELECT i.task_id, (i.task_id IN (SELECT task_id FROM released))::int AS changed
FROM input i
ORDER BY i.n;

-- name: task_recover_unheld
-- Give back every task claimed under this worker's id that it does not
-- execute (%(held)s names those it does): claims that committed while their
-- answer was lost with the connection, so that the worker never heard of
-- them. The worker runs this once its connection is back after a failure,
-- instead of leaving those leases to lapse: the task is due at once, and no
-- lapse and no failure is counted (the claim's attempt was never started).
-- Served by tasks_claimed_idx (worker_id, claimed rows only). A run paused
-- meanwhile gets its task back paused.
WITH released AS (
    UPDATE {schema}.tasks t
    SET status = CASE WHEN r.status = 'paused' THEN 'paused' ELSE 'ready' END,
        worker_id = NULL, lease_expires_at = NULL, claimed_at = NULL, available_at = {now}
    FROM {schema}.runs r
    WHERE r.id = t.run_id AND t.worker_id = %(worker_id)s AND t.status = 'claimed'
      AND NOT (t.id = ANY(%(held)s))
    RETURNING t.run_id, t.kind, t.attempt
), queued AS (
    UPDATE {schema}.runs r SET status = 'queued', updated_at = {now}
    FROM released WHERE r.id = released.run_id AND released.kind = 'run' AND r.status = 'running'
), event AS (
    INSERT INTO {schema}.history (run_id, at, event, attempt, worker_id, detail)
    SELECT run_id, {now}, 'run_released', attempt, %(worker_id)s,
           jsonb_build_object('reason', 'claim answer lost', 'available_at', {now})
    FROM released
)
SELECT count(*) AS changed FROM released;

-- name: task_reap
-- The reaper reaps the tasks whose lease lapsed: they go back to ready (their worker died
-- or stalled). A task whose leases lapsed as many times as its workflow's
-- max_lapses (stored with the definition, 5 when the version is not
-- registered) is reaped for good, so a run that kills every worker cannot cycle
-- forever, and its run still compensates:
-- - a step task fails its step, as if the step had raised LeaseExpired, and
--   the run is woken (or given a task, a graph run having none of its own) to
--   handle that failure like any other, its compensations included;
-- - a run's own task is handed on to compensate ('compensate' below): the run
--   turns 'compensating' with the LeaseExpired error, and its task is ready
--   again with its lapses counted afresh. The execution that claims it
--   replays the run from its checkpoints but runs nothing new: at the first
--   step without a final checkpoint it raises that error, so the workers are
--   not killed again by what killed them, and the compensations registered
--   so far run (engine/compensation.py);
-- - a run's own task that lapses max_lapses times while its run is
--   compensating fails the run without its compensations, and says so.
-- SKIP LOCKED: a task whose owner is mid-checkpoint holds its row lock, and
-- is skipped rather than waited for.
WITH lapsed AS (
    SELECT t.id, t.run_id, t.kind, t.step_position, t.step_name, t.worker_id, t.attempt,
           t.lapses + 1 AS lapses,
           coalesce((SELECT w.max_lapses FROM {schema}.workflows w
                     WHERE w.name = t.workflow AND w.version = t.version), 5) AS max_lapses,
           (SELECT r.status FROM {schema}.runs r WHERE r.id = t.run_id) AS run_status
    FROM {schema}.tasks t
    WHERE t.status = 'claimed' AND t.lease_expires_at < {now}
    ORDER BY t.id
    LIMIT %(limit)s
    FOR UPDATE OF t SKIP LOCKED
), fated AS (
    SELECT e.*,
           CASE WHEN e.lapses < e.max_lapses THEN 'requeue'
                WHEN e.kind = 'run'
                     AND e.run_status NOT IN ('compensating', 'completed', 'failed', 'cancelled',
                                              'compensated', 'compensation_failed')
                THEN 'compensate'
                ELSE 'for_good' END AS fate,
           format('the lease on this run lapsed %%s times: its workers died or stalled '
                  'while running it', e.lapses) AS message
    FROM lapsed e
), ready_again AS (
    -- Claimable again, or handed on to compensate with its lapses counted afresh.
    UPDATE {schema}.tasks t
    SET status = 'ready', worker_id = NULL, lease_expires_at = NULL, claimed_at = NULL,
        lapses = CASE WHEN e.fate = 'requeue' THEN e.lapses ELSE 0 END, available_at = {now}
    FROM fated e
    WHERE t.id = e.id AND e.fate IN ('requeue', 'compensate')
    RETURNING t.run_id, t.kind
), requeued AS (
    UPDATE {schema}.runs r SET status = 'queued', updated_at = {now}
    FROM fated e
    WHERE r.id = e.run_id AND e.fate = 'requeue' AND e.kind = 'run' AND r.status = 'running'
), compensating AS (
    UPDATE {schema}.runs r
    SET status = 'compensating', waiting_for = NULL, updated_at = {now},
        error = jsonb_build_object('type', 'LeaseExpired', 'message', e.message,
                                   'lapses', e.lapses)
    FROM fated e
    WHERE r.id = e.run_id AND e.fate = 'compensate'
), for_good AS (
    DELETE FROM {schema}.tasks t USING fated e
    WHERE t.id = e.id AND e.fate = 'for_good'
    RETURNING t.run_id, t.kind, t.step_position, e.lapses
), runs_for_good AS (
    -- Only a compensating run's task is reaped for good here: its compensations did
    -- not all run, and the error says so, the failure that started them kept.
    UPDATE {schema}.runs r
    SET status = 'failed', completed_at = {now}, updated_at = {now}, waiting_for = NULL,
        error = jsonb_build_object(
            'type', 'LeaseExpired',
            'message', format('the lease on this run lapsed %%s times while it ran its '
                              'compensations: its workers died or stalled, and the '
                              'compensations not completed by then did not run', for_good.lapses),
            'lapses', for_good.lapses,
            'failure', r.error)
    FROM for_good
    WHERE r.id = for_good.run_id AND for_good.kind = 'run'
      AND r.status NOT IN ('completed', 'failed', 'cancelled', 'compensated', 'compensation_failed')
), steps_for_good AS (
    UPDATE {schema}.steps s
    SET status = 'failed', attempts = greatest(s.attempts, 1), completed_at = {now},
        wake_at = NULL,
        error = jsonb_build_object(
            'type', 'LeaseExpired',
            'message', format('the lease on this step lapsed %%s times: its workers died or '
                              'stalled while running it', for_good.lapses))
    FROM for_good
    WHERE for_good.kind = 'step' AND s.run_id = for_good.run_id AND s.position = for_good.step_position
      AND s.status IN ('pending', 'retrying', 'waiting')
    RETURNING s.run_id
), woken AS (
    -- A function workflow's task, parked at its gather: due now.
    UPDATE {schema}.tasks t SET available_at = {now}
    WHERE t.id IN (SELECT t2.id FROM {schema}.tasks t2 JOIN steps_for_good d ON d.run_id = t2.run_id
                   WHERE t2.kind = 'run' AND t2.status = 'ready')
), revisit AS (
    -- A graph run has no task of its own once its steps are scheduled: one
    -- decides what follows the failure (graph.advance unwinds the run).
    INSERT INTO {schema}.tasks (run_id, kind, queue, workflow, version, priority, partition_key,
                                status, available_at, created_at)
    SELECT DISTINCT r.id, 'run', r.queue, r.workflow, r.version, r.priority, r.partition_key,
           'ready', {now}, {now}
    FROM steps_for_good d JOIN {schema}.runs r ON r.id = d.run_id
    WHERE NOT EXISTS (SELECT 1 FROM {schema}.tasks t WHERE t.run_id = r.id AND t.kind = 'run')
      AND r.status NOT IN ('completed', 'failed', 'cancelled', 'compensated', 'compensation_failed')
), event AS (
    INSERT INTO {schema}.history (run_id, at, event, step_position, attempt, worker_id, detail)
    SELECT e.run_id, {now},
           CASE WHEN e.fate = 'requeue' THEN 'lease_expired'
                WHEN e.fate = 'compensate' THEN 'run_compensating'
                WHEN e.kind = 'run' THEN 'run_failed'
                ELSE 'step_failed' END,
           e.step_position, e.attempt, e.worker_id,
           CASE WHEN e.fate = 'compensate'
                THEN jsonb_build_object('type', 'LeaseExpired', 'message', e.message,
                                        'lapses', e.lapses)
                WHEN e.fate = 'for_good' AND e.kind = 'run'
                THEN jsonb_build_object('lapses', e.lapses, 'compensating', true,
                                        'compensations', 'not all run')
                ELSE jsonb_build_object('lapses', e.lapses) END
    FROM fated e
)
SELECT (SELECT count(*) FROM ready_again) - (SELECT count(*) FROM fated WHERE fate = 'compensate')
           AS requeued,
       (SELECT count(*) FROM for_good) + (SELECT count(*) FROM fated WHERE fate = 'compensate')
           AS for_good;

-- name: task_lock_fenced
-- Lock the held task row inside a ctx.transaction step before the user's SQL
-- runs: if the lease is gone the step does not start, and while the lock is
-- held the reaper skips this task, so the checkpoint commits with the user's
-- writes or not at all.
SELECT run_id FROM {schema}.tasks
WHERE id = %(task_id)s AND worker_id = %(worker_id)s AND attempt = %(attempt)s
  AND status = 'claimed'
FOR UPDATE;

-- name: task_settle
-- Settle a held task whose run is not running any more (cancelled, paused or
-- finished while the task was claimed): a finished run's task is deleted, a
-- paused run's task is parked, any other is handed back ready. Fenced; read
-- with a fresh snapshot, so it sees the change that made the claim skip the run.
WITH run AS (
    SELECT r.status FROM {schema}.runs r JOIN {schema}.tasks t ON t.run_id = r.id
    WHERE t.id = %(task_id)s
), parked AS (
    UPDATE {schema}.tasks
    SET status = CASE WHEN (SELECT status FROM run) = 'paused' THEN 'paused' ELSE 'ready' END,
        worker_id = NULL, lease_expires_at = NULL, claimed_at = NULL, available_at = {now}
    WHERE id = %(task_id)s AND worker_id = %(worker_id)s AND attempt = %(attempt)s
      AND status = 'claimed'
      AND (SELECT status FROM run) NOT IN ('completed', 'failed', 'cancelled', 'compensated',
                                           'compensation_failed')
    RETURNING id
), dropped AS (
    DELETE FROM {schema}.tasks
    WHERE id = %(task_id)s AND worker_id = %(worker_id)s AND attempt = %(attempt)s
      AND status = 'claimed'
      AND (SELECT status FROM run) IN ('completed', 'failed', 'cancelled', 'compensated',
                                       'compensation_failed')
    RETURNING id
)
SELECT (SELECT status FROM run) AS run_status;

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
SELECT (extract(epoch FROM least(
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
)) - extract(epoch FROM {now}))::float8 AS seconds;

-- name: task_finish
-- Delete a held task whose work is done (a graph's first task once it has
-- scheduled the graph's first steps). Fenced.
DELETE FROM {schema}.tasks
WHERE id = %(task_id)s AND worker_id = %(worker_id)s AND attempt = %(attempt)s
  AND status = 'claimed'
RETURNING run_id;

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
