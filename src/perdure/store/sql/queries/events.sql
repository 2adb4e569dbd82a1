-- Named queries on the events a run publishes (ctx.set_event).

-- name: event_get
-- The latest value a run published under an event key.
SELECT value FROM {schema}.events WHERE run_id = %(run_id)s AND key = %(key)s;

-- name: event_list
-- The events a run published (ctx.set_event), latest value of each key.
SELECT key, value, position, updated_at
FROM {schema}.events
WHERE run_id = %(run_id)s
ORDER BY position;
