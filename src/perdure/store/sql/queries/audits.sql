-- Named queries on the audit record (table audit, migration 0019).

-- name: audit_write
-- Record one action: who, how known, from where, what, which runs, the outcome.
INSERT INTO {schema}.audit (at, actor, via, role, source, address, action, runs, outcome, detail)
VALUES ({now}, %(actor)s, %(via)s, %(role)s, %(source)s, %(address)s, %(action)s,
        %(runs)s::text[], %(outcome)s, %(detail)s::jsonb)
RETURNING id;

-- name: audit_list
-- The record, newest first, filtered by whichever of actor, action, run,
-- outcome and since are not null; after the cursor (at, id) when given.
SELECT id, at, actor, via, role, source, address, action, runs, outcome, detail
FROM {schema}.audit
WHERE (%(actor)s::text IS NULL OR actor = %(actor)s::text)
  AND (%(action)s::text IS NULL OR action = %(action)s::text)
  AND (%(run)s::text IS NULL OR runs @> ARRAY[%(run)s::text])
  AND (%(outcome)s::text IS NULL OR outcome = %(outcome)s::text)
  AND (%(since)s::timestamptz IS NULL OR at >= %(since)s::timestamptz)
  AND (%(before_id)s::bigint IS NULL OR id < %(before_id)s::bigint)
ORDER BY at DESC, id DESC
LIMIT %(limit)s;

-- name: audit_prune
-- Retention: the rows older than %(before)s go when the schema's owner runs
-- this; NULL (nothing deleted) for any other role.
SELECT {schema}.audit_prune(%(before)s::timestamptz) AS deleted;
