-- Named queries on emitted events (app.emit, emit_event in SQL), the waits
-- on them (ctx.wait_for_event) and the workflows they start (migration 0020).
-- Not the `events` table: that one holds what runs publish (ctx.set_event).

-- name: emission_emit
-- Emit an event through emit_event's internal form: recorded once per name
-- and key, matching waits completed and their runs made due, triggered
-- workflows started, all in the caller's transaction.
SELECT id, created, woke, started
FROM {schema}.emit_event(%(name)s, %(payload)s::jsonb, %(key)s, %(now)s, %(max_bytes)s);

-- name: emission_emit_many
-- Emit the events of the JSON array %(events)s through emit_events' internal
-- form, in order, all or none: one row per element (its index from 0), as
-- emission_emit answers.
SELECT index, id, created, woke, started
FROM {schema}.emit_events(%(events)s::jsonb, %(now)s, %(max_bytes)s, %(max_events)s)
ORDER BY index;

-- name: emission_emit_deferring
-- As emission_emit, in a transaction of its own whose wake-up notifications
-- are deferred: with the queues to notify after its commit (migration 0030).
SELECT id, created, woke, started, queues
FROM {schema}.emit_event_deferring(%(name)s, %(payload)s::jsonb, %(key)s, %(now)s,
                                   %(max_bytes)s);

-- name: emission_emit_many_deferring
-- As emission_emit_many, in a transaction of its own whose wake-up
-- notifications are deferred: each row with the queues to notify after its
-- commit (migration 0030).
SELECT index, id, created, woke, started, queues
FROM {schema}.emit_events_deferring(%(events)s::jsonb, %(now)s, %(max_bytes)s,
                                    %(max_events)s)
ORDER BY index;

-- name: emission_defer_wakeups
-- Until this transaction ends, the tasks' trigger lists the queues it would
-- notify instead of notifying (migration 0026): run first in the emitter's
-- transaction, then emission_deferred_wakeups last, then emission_wake after
-- the commit.
SELECT set_config('perdure.deferred_wakeups', E'\n', true) = E'\n' AS deferred;

-- name: emission_deferred_wakeups
-- The queues this transaction made work ready on, each followed by a newline.
SELECT coalesce(current_setting('perdure.deferred_wakeups', true), '') AS queues;

-- name: emission_wake
-- Notify each queue of %(queues)s on the wakeup channel, in a transaction
-- that writes nothing else: its commit waits for no WAL flush.
SELECT count(pg_notify(%(channel)s, q)) AS notified
FROM jsonb_array_elements_text(%(queues)s::jsonb) AS q;

-- name: emission_lock
-- The wait's side of the lock on an event name (see migration 0020): taken
-- first in the transaction that looks for the event and parks.
SELECT pg_advisory_xact_lock({schema}.event_lock_key(%(name)s)) IS NULL AS locked;

-- name: emission_take
-- For the wait at %(position)s: its output if an emitter completed it while
-- the task was being claimed; else the oldest event named %(name)s whose
-- payload contains %(match)s, emitted since %(since)s (or now minus
-- %(lookback)s seconds), that this run has not taken yet: taken now, the
-- wait completed with it, its parked row removed. Run after emitted_lock in
-- the same transaction. Fenced.
WITH lease AS (
    SELECT run_id FROM {schema}.tasks
    WHERE id = %(task_id)s AND worker_id = %(worker_id)s AND attempt = %(attempt)s
      AND status = 'claimed'
), delivered AS (
    SELECT s.output FROM {schema}.steps s JOIN lease ON s.run_id = lease.run_id
    WHERE s.position = %(position)s AND s.status = 'completed'
), found AS (
    SELECT e.id, e.name, e.key, e.payload, e.emitted_at, lease.run_id
    FROM {schema}.emitted_events e, lease
    WHERE NOT EXISTS (SELECT 1 FROM delivered)
      AND e.name = %(name)s AND e.payload @> %(match)s::jsonb
      AND e.emitted_at >= coalesce(%(since)s::timestamptz,
                                   {now} - make_interval(secs => %(lookback)s))
      AND NOT EXISTS (SELECT 1 FROM {schema}.event_deliveries d
                      WHERE d.event_id = e.id AND d.run_id = lease.run_id)
    ORDER BY e.id
    LIMIT 1
), taken AS (
    INSERT INTO {schema}.event_deliveries (event_id, run_id, position, delivered_at)
    SELECT id, run_id, %(position)s, {now} FROM found
    ON CONFLICT DO NOTHING
    RETURNING event_id, run_id
), record AS (
    SELECT f.run_id, f.id,
           jsonb_build_object('id', f.id, 'name', f.name, 'key', f.key, 'payload', f.payload,
                              'emitted_at', f.emitted_at) AS output
    FROM found f JOIN taken t ON t.event_id = f.id
), checkpoint AS (
    INSERT INTO {schema}.steps (run_id, position, name, kind, status, attempts, output,
                                worker_id, started_at, completed_at)
    SELECT run_id, %(position)s, %(step_name)s, 'event_wait', 'completed', 1, output,
           %(worker_id)s, {now}, {now}
    FROM record
    ON CONFLICT (run_id, position) DO UPDATE
    SET status = 'completed', output = EXCLUDED.output, completed_at = EXCLUDED.completed_at,
        worker_id = EXCLUDED.worker_id
    WHERE {schema}.steps.status = 'waiting'
), unparked AS (
    DELETE FROM {schema}.event_waits w USING lease
    WHERE w.run_id = lease.run_id AND w.position = %(position)s
      AND (EXISTS (SELECT 1 FROM record) OR EXISTS (SELECT 1 FROM delivered))
), event AS (
    INSERT INTO {schema}.history (run_id, at, event, step_position, step_name, attempt, worker_id,
                                  detail)
    SELECT run_id, {now}, 'event_consumed', %(position)s, %(step_name)s, %(attempt)s,
           %(worker_id)s, jsonb_build_object('event_id', id, 'name', %(name)s)
    FROM record
)
-- written: the wait has its event (taken now, or delivered by an emitter).
SELECT (SELECT count(*) FROM lease) AS leased,
       EXISTS (SELECT 1 FROM delivered UNION ALL SELECT 1 FROM record) AS written,
       coalesce((SELECT output FROM delivered), (SELECT output FROM record)) AS payload,
       {now} AS db_now;

-- name: emission_park
-- File the wait at %(position)s under its event name and match's anchor, for
-- emitters to find. Run before step_wait in the same transaction. Fenced.
INSERT INTO {schema}.event_waits (run_id, position, name, match, anchor, since)
SELECT run_id, %(position)s, %(name)s, %(match)s::jsonb,
       {schema}.event_anchor(%(match)s::jsonb),
       coalesce(%(since)s::timestamptz, {now} - make_interval(secs => %(lookback)s))
FROM {schema}.tasks
WHERE id = %(task_id)s AND worker_id = %(worker_id)s AND attempt = %(attempt)s
  AND status = 'claimed'
ON CONFLICT (run_id, position) DO NOTHING;

-- name: emission_unpark
-- Remove the parked wait at %(position)s of a run (it timed out).
DELETE FROM {schema}.event_waits WHERE run_id = %(run_id)s AND position = %(position)s;

-- name: emission_list
-- The latest emitted events (optionally of one name), newest first, each with
-- the runs it woke (by a wait) and started (by a trigger).
SELECT e.id, e.name, e.key, e.payload, e.emitted_at,
       coalesce((SELECT jsonb_agg(d.run_id::text ORDER BY d.run_id) FROM {schema}.event_deliveries d
                 WHERE d.event_id = e.id AND d.position IS NOT NULL), '[]') AS woke,
       coalesce((SELECT jsonb_agg(d.run_id::text ORDER BY d.run_id) FROM {schema}.event_deliveries d
                 WHERE d.event_id = e.id AND d.position IS NULL), '[]') AS started
FROM {schema}.emitted_events e
WHERE (%(name)s::text IS NULL OR e.name = %(name)s)
ORDER BY e.id DESC
LIMIT %(limit)s;

-- name: emission_counts
-- How many events were emitted in the last %(seconds)s seconds, and how many
-- of them woke or started a run (the metrics' scrape: the time index bounds it).
SELECT count(*) AS emitted,
       count(*) FILTER (WHERE EXISTS (SELECT 1 FROM {schema}.event_deliveries d
                                      WHERE d.event_id = e.id)) AS matched
FROM {schema}.emitted_events e
WHERE e.emitted_at >= {now} - make_interval(secs => %(seconds)s);

-- name: emission_prune
-- Delete up to %(limit)s events emitted before %(cutoff)s (retention), with
-- their deliveries (ON DELETE CASCADE); how many.
WITH deleted AS (
    DELETE FROM {schema}.emitted_events
    WHERE id IN (SELECT id FROM {schema}.emitted_events WHERE emitted_at < %(cutoff)s
                 ORDER BY emitted_at LIMIT %(limit)s)
    RETURNING id
)
SELECT count(*) AS pruned FROM deleted;

-- name: emission_triggers_set
-- Replace the event triggers of workflow %(workflow)s with those given, each
-- with its batching (batch_size and batch_window in seconds, NULL: none;
-- migration 0023).
WITH given AS (
    SELECT DISTINCT ON (t.name, t.match::jsonb) t.name, t.match::jsonb AS match,
           t.batch_size, t.batch_window
    FROM unnest(%(names)s::text[], %(matches)s::text[], %(batch_sizes)s::integer[],
                %(batch_windows)s::float8[]) AS t(name, match, batch_size, batch_window)
), gone AS (
    DELETE FROM {schema}.event_triggers g
    WHERE g.workflow = %(workflow)s
      AND NOT EXISTS (SELECT 1 FROM given WHERE given.name = g.name AND given.match = g.match)
)
INSERT INTO {schema}.event_triggers (workflow, name, match, anchor, updated_at, batch_size,
                                     batch_window)
SELECT %(workflow)s, name, match, {schema}.event_anchor(match), {now}, batch_size, batch_window
FROM given
ON CONFLICT (workflow, name, match) DO UPDATE
SET updated_at = EXCLUDED.updated_at, batch_size = EXCLUDED.batch_size,
    batch_window = EXCLUDED.batch_window;

-- name: emission_triggers_list
-- Every event trigger, by workflow, with its batching.
SELECT workflow, name, match, batch_size, batch_window
FROM {schema}.event_triggers ORDER BY workflow, name, match::text;
