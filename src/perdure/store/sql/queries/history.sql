-- Named queries on a run's history and the day partitions of history.

-- name: history_list
-- The history of one run, oldest first.
SELECT id, at, event, step_position, step_name, attempt, worker_id, detail, duration
FROM {schema}.history
WHERE run_id = %(run_id)s
ORDER BY id;

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

-- name: history_list_archived
-- The history of an archived run, oldest first.
SELECT id, at, event, step_position, step_name, attempt, worker_id, detail, duration
FROM {schema}.archive_history
WHERE run_id = %(run_id)s
ORDER BY id;
