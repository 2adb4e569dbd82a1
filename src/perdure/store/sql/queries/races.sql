-- Named queries on races of waits (ctx.wait_first, ctx.wait_all; migration
-- 0025): what a race's worker reads, consumes and files for its members. The
-- race's checkpoint itself is written by step_checkpoint and step_wait.

-- name: race_state
-- The race's checkpoint at %(position)s of the task's run as it is now (an
-- emitter may have completed it since the task was claimed), with the
-- statement's time. Run after the event names' and the run's locks. Fenced.
WITH lease AS (
    SELECT run_id FROM {schema}.tasks
    WHERE id = %(task_id)s AND worker_id = %(worker_id)s AND attempt = %(attempt)s
      AND status = 'claimed'
)
SELECT (SELECT count(*) FROM lease) AS leased,
       EXISTS (SELECT 1 FROM {schema}.steps s JOIN lease ON s.run_id = lease.run_id
               WHERE s.position = %(position)s AND s.status = 'completed') AS written,
       (SELECT s.output FROM {schema}.steps s JOIN lease ON s.run_id = lease.run_id
        WHERE s.position = %(position)s AND s.status = 'completed') AS payload,
       {now} AS db_now;

-- name: race_signal
-- Consume the oldest pending signal named %(name)s for the race at
-- %(position)s (its winner): the signal's payload. The race's checkpoint is
-- written next in the same transaction, which took run_lock first. Fenced.
WITH lease AS (
    SELECT run_id FROM {schema}.tasks
    WHERE id = %(task_id)s AND worker_id = %(worker_id)s AND attempt = %(attempt)s
      AND status = 'claimed'
), taken AS (
    UPDATE {schema}.signals s
    SET consumed_at = {now}, consumed_position = %(position)s
    WHERE s.id = (SELECT p.id FROM {schema}.signals p JOIN lease ON p.run_id = lease.run_id
                  WHERE p.name = %(name)s AND p.consumed_at IS NULL
                  ORDER BY p.id LIMIT 1)
    RETURNING s.run_id, s.id, s.payload
), event AS (
    INSERT INTO {schema}.history (run_id, at, event, step_position, step_name, attempt, worker_id,
                                  detail)
    SELECT run_id, {now}, 'signal_consumed', %(position)s, %(step_name)s, %(attempt)s,
           %(worker_id)s, jsonb_build_object('signal_id', id, 'name', %(name)s)
    FROM taken
)
SELECT (SELECT count(*) FROM lease) AS leased, (SELECT count(*) FROM taken) AS written,
       (SELECT payload FROM taken) AS payload, {now} AS db_now;

-- name: race_event
-- Take, for the race at %(position)s, the oldest event named %(name)s whose
-- payload contains %(match)s, emitted since %(since)s (or now minus
-- %(lookback)s seconds), that this run has not taken yet: its delivery
-- recorded, the event record as payload. The race's checkpoint is written
-- next in the same transaction, which took emission_lock first. Fenced.
WITH lease AS (
    SELECT run_id FROM {schema}.tasks
    WHERE id = %(task_id)s AND worker_id = %(worker_id)s AND attempt = %(attempt)s
      AND status = 'claimed'
), found AS (
    SELECT e.id, e.name, e.key, e.payload, e.emitted_at, lease.run_id
    FROM {schema}.emitted_events e, lease
    WHERE e.name = %(name)s AND e.payload @> %(match)s::jsonb
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
), event AS (
    INSERT INTO {schema}.history (run_id, at, event, step_position, step_name, attempt, worker_id,
                                  detail)
    SELECT run_id, {now}, 'event_consumed', %(position)s, %(step_name)s, %(attempt)s,
           %(worker_id)s, jsonb_build_object('event_id', id, 'name', %(name)s)
    FROM record
)
SELECT (SELECT count(*) FROM lease) AS leased, EXISTS (SELECT 1 FROM record) AS written,
       (SELECT output FROM record) AS payload, {now} AS db_now;

-- name: race_park
-- File the event members of the race at %(position)s (parallel arrays, in
-- the race's order) for emitters to find: each from %(since)s on (or now
-- minus its lookback). Run before step_wait in the same transaction. Fenced.
INSERT INTO {schema}.race_event_waits (run_id, position, ord, member, name, match, anchor, since)
SELECT t.run_id, %(position)s, m.ord::integer - 1, m.member, m.name, m.match::jsonb,
       {schema}.event_anchor(m.match::jsonb),
       coalesce(%(since)s::timestamptz, {now}) - make_interval(secs => m.lookback)
FROM {schema}.tasks t,
     unnest(%(members)s::text[], %(names)s::text[], %(matches)s::text[],
            %(lookbacks)s::float8[]) WITH ORDINALITY AS m(member, name, match, lookback, ord)
WHERE t.id = %(task_id)s AND t.worker_id = %(worker_id)s AND t.attempt = %(attempt)s
  AND t.status = 'claimed'
ON CONFLICT (run_id, position, ord) DO NOTHING;

-- name: race_unpark
-- Remove the filed event members of the race at %(position)s of a run (it
-- was won, or its timer fired).
DELETE FROM {schema}.race_event_waits WHERE run_id = %(run_id)s AND position = %(position)s;
