-- Named queries on schedules: cron expressions that start runs, once per tick.

-- name: schedule_upsert
-- Record a schedule's definition. A new schedule starts at %(next_tick)s.
-- An existing one takes the new definition; its next tick is recomputed only
-- when its cron or time zone changed, so a worker restart neither skips nor
-- repeats a tick, and its pause state is kept. Returns the row as it is now.
-- A schedule written or changed tells the duty holder's ticker at once
-- (NOTIFY on the wakeup channel, payload %(payload)s): it sleeps until the
-- next tick it knows of, and looks again only when told or every minute.
WITH up AS (
    INSERT INTO {schema}.schedules AS s (name, cron, timezone, workflow, input, catchup,
                                         max_catchup, source, next_tick, created_at, updated_at)
    VALUES (%(name)s, %(cron)s, %(timezone)s, %(workflow)s, %(input)s::jsonb, %(catchup)s,
            %(max_catchup)s, %(source)s, %(next_tick)s, {now}, {now})
    ON CONFLICT (name) DO UPDATE
    SET cron = EXCLUDED.cron, timezone = EXCLUDED.timezone, workflow = EXCLUDED.workflow,
        input = EXCLUDED.input, catchup = EXCLUDED.catchup, max_catchup = EXCLUDED.max_catchup,
        source = EXCLUDED.source, updated_at = EXCLUDED.updated_at,
        next_tick = CASE WHEN (s.cron, s.timezone) = (EXCLUDED.cron, EXCLUDED.timezone)
                         THEN s.next_tick ELSE EXCLUDED.next_tick END
    WHERE (s.cron, s.timezone, s.workflow, s.input, s.catchup, s.max_catchup, s.source)
          IS DISTINCT FROM (EXCLUDED.cron, EXCLUDED.timezone, EXCLUDED.workflow, EXCLUDED.input,
                            EXCLUDED.catchup, EXCLUDED.max_catchup, EXCLUDED.source)
    RETURNING s.*
)
SELECT up.* FROM up, LATERAL (SELECT pg_notify(%(channel)s, %(payload)s)) AS nudge
UNION ALL
SELECT * FROM {schema}.schedules WHERE name = %(name)s AND NOT EXISTS (SELECT 1 FROM up);

-- name: schedule_list
-- Every schedule (or the one named), by name.
SELECT * FROM {schema}.schedules
WHERE %(name)s::text IS NULL OR name = %(name)s
ORDER BY name;

-- name: schedule_get
-- One schedule with its input as JSON text and the clock's time: what
-- `perdure schedules trigger` starts a run from.
SELECT name, workflow, input::text AS input_json, {now} AS db_now
FROM {schema}.schedules WHERE name = %(name)s;

-- name: schedule_delete
-- Remove a schedule; the runs it started stay. Returns its name if it existed.
DELETE FROM {schema}.schedules WHERE name = %(name)s RETURNING name;

-- name: schedule_set_paused
-- Pause or resume a schedule. A paused schedule's ticks are not started;
-- next_tick stays where it was, so on resume the ticks missed meanwhile are
-- handled by the schedule's catch-up policy. The ticker is told, as by
-- schedule_upsert.
WITH up AS (
    UPDATE {schema}.schedules
    SET paused = %(paused)s, updated_at = {now}
    WHERE name = %(name)s
    RETURNING *
)
SELECT up.* FROM up, LATERAL (SELECT pg_notify(%(channel)s, %(payload)s)) AS nudge;

-- name: schedule_due
-- For a ticker: the schedules due now (at most %(limit)s, the most overdue
-- first) and the seconds until the next tick of any running schedule, so an
-- idle ticker sleeps until then. Both read schedules_next_tick_idx.
SELECT array(SELECT name FROM {schema}.schedules
             WHERE NOT paused AND next_tick <= {now}
             ORDER BY next_tick LIMIT %(limit)s) AS due,
       (SELECT (extract(epoch FROM min(next_tick)) - extract(epoch FROM {now}))::float8
        FROM {schema}.schedules WHERE NOT paused) AS seconds;

-- name: schedule_lock_due
-- Take one due schedule for this transaction. SKIP LOCKED: a schedule another
-- worker is ticking is left to it. A row that another worker advanced while
-- this statement waited no longer matches next_tick <= now (READ COMMITTED
-- re-checks the newest row version), so it is not returned either.
SELECT name, cron, timezone, workflow, input::text AS input_json, catchup, max_catchup,
       next_tick, {now} AS db_now
FROM {schema}.schedules
WHERE name = %(name)s AND NOT paused AND next_tick <= {now}
FOR UPDATE SKIP LOCKED;

-- name: schedule_advance
-- After starting a schedule's due ticks, in the same transaction: move
-- next_tick past them and record the last tick started and its run.
UPDATE {schema}.schedules
SET next_tick = %(next_tick)s,
    last_tick = coalesce(%(last_tick)s, last_tick),
    last_run_id = coalesce(%(last_run_id)s::uuid, last_run_id)
WHERE name = %(name)s;

-- name: schedule_now
-- The time of the clock every query compares with (the server's, or a test's
-- virtual clock): a new schedule's first tick is the first after it.
SELECT {now} AS now;
