-- Named queries of retention: pruning and archiving finished runs, the day
-- partitions of history, and the lock that lets one maintainer at a time
-- work. See docs/operating.md.

-- name: run_prune
-- Delete (or, with %(archive)s, move to the archive tables) one batch of at
-- most %(limit)s runs that finished before %(before)s, oldest first, in one
-- statement: its own short transaction. Left alone: a run that is not final,
-- a run with a child that is not final, a child whose parent is not final (it
-- may still read its result), and a run with a task a worker holds (a
-- parallel step finishing after its run ended). SKIP LOCKED: a run whose row
-- someone holds now (a retry, a signal) is skipped, not waited for. Steps,
-- tasks, signals, events and streams go with their run (ON DELETE CASCADE);
-- history rows stay in their day partition, which retention drops whole,
-- except those in the default partition, deleted here. The archive copies
-- read the statement's snapshot, taken before the delete.
WITH doomed AS (
    SELECT r.id
    FROM {schema}.runs r
    WHERE r.status IN ('completed', 'failed', 'cancelled', 'compensated', 'compensation_failed')
      AND r.completed_at < %(before)s
      AND NOT EXISTS (SELECT 1 FROM {schema}.runs c
                      WHERE c.parent_run_id = r.id
                        AND c.status NOT IN ('completed', 'failed', 'cancelled', 'compensated',
                                             'compensation_failed'))
      AND NOT EXISTS (SELECT 1 FROM {schema}.runs p
                      WHERE p.id = r.parent_run_id
                        AND p.status NOT IN ('completed', 'failed', 'cancelled', 'compensated',
                                             'compensation_failed'))
      AND NOT EXISTS (SELECT 1 FROM {schema}.tasks t
                      WHERE t.run_id = r.id AND t.status = 'claimed')
    ORDER BY r.completed_at
    LIMIT %(limit)s
    FOR UPDATE OF r SKIP LOCKED
), archived_runs AS (
    INSERT INTO {schema}.archive_runs
    SELECT r.* FROM {schema}.runs r JOIN doomed d ON d.id = r.id WHERE %(archive)s
), archived_steps AS (
    INSERT INTO {schema}.archive_steps
    SELECT s.* FROM {schema}.steps s JOIN doomed d ON d.id = s.run_id WHERE %(archive)s
), archived_history AS (
    INSERT INTO {schema}.archive_history
    SELECT h.* FROM {schema}.history h JOIN doomed d ON d.id = h.run_id WHERE %(archive)s
), archived_signals AS (
    INSERT INTO {schema}.archive_signals
    SELECT s.* FROM {schema}.signals s JOIN doomed d ON d.id = s.run_id WHERE %(archive)s
), archived_events AS (
    INSERT INTO {schema}.archive_events
    SELECT e.* FROM {schema}.events e JOIN doomed d ON d.id = e.run_id WHERE %(archive)s
), archived_streams AS (
    INSERT INTO {schema}.archive_streams
    SELECT s.* FROM {schema}.streams s JOIN doomed d ON d.id = s.run_id WHERE %(archive)s
), stragglers AS (
    DELETE FROM {schema}.history_default h USING doomed d WHERE h.run_id = d.id
), deleted AS (
    DELETE FROM {schema}.runs r USING doomed d WHERE r.id = d.id
    RETURNING r.id
)
SELECT count(*) AS pruned FROM deleted;

-- name: run_prune_count
-- How many runs run_prune would take, in every batch together: the same
-- conditions, without locking or limit (perdure prune --dry-run).
SELECT count(*) AS prunable
FROM {schema}.runs r
WHERE r.status IN ('completed', 'failed', 'cancelled', 'compensated', 'compensation_failed')
  AND r.completed_at < %(before)s
  AND NOT EXISTS (SELECT 1 FROM {schema}.runs c
                  WHERE c.parent_run_id = r.id
                    AND c.status NOT IN ('completed', 'failed', 'cancelled', 'compensated',
                                         'compensation_failed'))
  AND NOT EXISTS (SELECT 1 FROM {schema}.runs p
                  WHERE p.id = r.parent_run_id
                    AND p.status NOT IN ('completed', 'failed', 'cancelled', 'compensated',
                                         'compensation_failed'))
  AND NOT EXISTS (SELECT 1 FROM {schema}.tasks t WHERE t.run_id = r.id AND t.status = 'claimed');

-- name: run_prune_cutoff
-- The time %(seconds)s seconds before now, on the clock every query uses.
SELECT {now} - make_interval(secs => %(seconds)s) AS cutoff;

-- name: history_partition_list
-- The partitions of history with their time ranges, oldest first, the default last.
SELECT name, from_at, to_at, is_default FROM {schema}.history_partitions();

-- name: history_partitions_ensure
-- Create the day partitions of history from today to %(days)s days ahead
-- where missing (see migration 0009); how many were created.
SELECT {schema}.history_partitions_ensure({now}, %(days)s) AS created;

-- name: history_partition_drop
-- Drop the oldest partition of history that ends by %(before)s, keeping the
-- entries of runs still kept; its name, or NULL when none is left to drop.
SELECT {schema}.history_partition_drop(%(before)s) AS name;

-- name: history_default_prune
-- Delete up to %(limit)s entries older than %(before)s from the default
-- partition whose run is gone (pruned, or archived with its history). The
-- default partition is small, so these are the only history rows retention
-- deletes one by one.
DELETE FROM {schema}.history_default
WHERE ctid = ANY(ARRAY(
    SELECT h.ctid FROM {schema}.history_default h
    WHERE h.at < %(before)s
      AND NOT EXISTS (SELECT 1 FROM {schema}.runs r WHERE r.id = h.run_id)
    LIMIT %(limit)s));

-- name: worker_maintenance_lock
-- Try to become this schema's maintainer (retention, history partitions):
-- a session advisory lock, held by the connection that runs the pass and
-- released by worker_maintenance_unlock or when the connection ends (a dead worker).
SELECT pg_try_advisory_lock(hashtext('perdure.maintenance:' || %(schema)s)) AS locked;

-- name: worker_maintenance_unlock
-- Stop being this schema's maintainer.
SELECT pg_advisory_unlock(hashtext('perdure.maintenance:' || %(schema)s)) AS unlocked;
