-- perdure schema, version 9: history at scale, and retention.
--
-- 1. The runs list is a keyset page on (created_at, id), newest first, so
--    each observability index ends with id: a page after a cursor is then one
--    index range, whatever the number of runs behind it. runs_finished_idx
--    holds only finished runs, by completion time: what retention reads.
-- 2. history becomes a table partitioned by day on `at` (UTC days, one
--    partition each, created ahead by the workers' maintenance), with a
--    default partition for rows no day partition covers. Retention drops
--    whole day partitions instead of deleting rows. A partitioned table's
--    primary key must include the partition key: it is (id, at). Each entry
--    also records the duration of what it ends (a step attempt, a run).
--    The existing rows stay where they are: the old table becomes one
--    partition ("history_legacy", from the beginning of time to the end of
--    the day after this migration), dropped whole once it is older than the
--    retention cutoff.
-- 3. Archive tables mirror runs, steps, history, signals, events and streams
--    column for column (a test checks it: a later migration that adds a
--    column to one of them adds it to its archive table too). `perdure prune
--    --archive` moves finished runs there.

-- 1. Runs ------------------------------------------------------------------

DROP INDEX runs_created_at_idx;
CREATE INDEX runs_created_at_idx ON runs (created_at DESC, id DESC);
DROP INDEX runs_status_created_at_idx;
CREATE INDEX runs_status_created_at_idx ON runs (status, created_at DESC, id DESC);
DROP INDEX runs_worker_created_at_idx;
CREATE INDEX runs_worker_created_at_idx ON runs (worker_id, created_at DESC, id DESC)
    WHERE worker_id IS NOT NULL;
DROP INDEX runs_workflow_created_at_idx;
CREATE INDEX runs_workflow_created_at_idx ON runs (workflow, created_at DESC, id DESC);
-- Retention reads finished runs oldest first; live runs are not in this index.
CREATE INDEX runs_finished_idx ON runs (completed_at)
    WHERE status IN ('completed', 'failed', 'cancelled', 'compensated', 'compensation_failed');

-- 2. History ---------------------------------------------------------------

ALTER TABLE history RENAME TO history_legacy;
ALTER TABLE history_legacy RENAME CONSTRAINT history_pkey TO history_legacy_pkey;
ALTER INDEX history_run_id_idx RENAME TO history_legacy_run_id_idx;
ALTER TABLE history_legacy ALTER COLUMN id DROP IDENTITY;
ALTER TABLE history_legacy ADD COLUMN duration interval;

CREATE TABLE history (
    id            bigint      GENERATED ALWAYS AS IDENTITY,
    run_id        uuid        NOT NULL,
    at            timestamptz NOT NULL,
    event         text        NOT NULL,
    step_position integer,
    step_name     text,
    attempt       integer,
    worker_id     text,
    detail        jsonb,
    -- What the entry ends took: a step attempt (start to checkpoint), a run
    -- (start to finish). NULL for entries that end nothing.
    duration      interval,
    PRIMARY KEY (id, at)
) PARTITION BY RANGE (at);
-- One run's timeline: in each partition, a range scan on run_id in id order.
CREATE INDEX history_run_id_idx ON history (run_id, id);
-- Rows no day partition covers: written while no worker created partitions
-- ahead, or moved here because their run outlived their day's partition.
CREATE TABLE history_default PARTITION OF history DEFAULT;

DO $$
DECLARE
    v_max_id bigint;
    v_max_at timestamptz;
    v_upper  timestamptz;
BEGIN
    SELECT max(id), max(at) INTO v_max_id, v_max_at FROM history_legacy;
    IF v_max_id IS NULL THEN
        DROP TABLE history_legacy;
        RETURN;
    END IF;
    -- New entries keep counting after the old ones, so id order stays time order.
    EXECUTE format('ALTER TABLE history ALTER COLUMN id RESTART WITH %s', v_max_id + 1);
    ALTER TABLE history_legacy DROP CONSTRAINT history_legacy_pkey;
    v_upper := date_trunc('day', greatest(v_max_at, now()), 'UTC') + interval '1 day';
    -- Attaching scans the old rows once to check the bound and builds the
    -- (id, at) key on them; its (run_id, id) index is adopted as it is.
    EXECUTE format('ALTER TABLE history ATTACH PARTITION history_legacy '
                   'FOR VALUES FROM (MINVALUE) TO (%L)', v_upper);
END
$$;

-- The partitions of history and the range of times each holds (NULL from_at:
-- from the beginning; the default partition has neither bound). For
-- operators: SELECT * FROM perdure.history_partitions();
CREATE FUNCTION history_partitions()
RETURNS TABLE (name text, from_at timestamptz, to_at timestamptz, is_default boolean)
LANGUAGE sql STABLE
SET search_path FROM CURRENT
AS $$
    SELECT c.relname::text,
           CASE WHEN m.bound[1] IS NULL OR m.bound[1] = 'MINVALUE' THEN NULL
                ELSE trim(BOTH '''' FROM m.bound[1])::timestamptz END,
           CASE WHEN m.bound[2] IS NULL THEN NULL
                ELSE trim(BOTH '''' FROM m.bound[2])::timestamptz END,
           m.bound IS NULL
    FROM pg_inherits i
    JOIN pg_class c ON c.oid = i.inhrelid
    -- pg_get_expr gives "FOR VALUES FROM ('...') TO ('...')" or "DEFAULT";
    -- the times print in this session's time zone and are read back in it.
    LEFT JOIN LATERAL regexp_match(pg_get_expr(c.relpartbound, c.oid),
                                   '^FOR VALUES FROM \((.*)\) TO \((.*)\)$') AS m(bound) ON true
    WHERE i.inhparent = 'history'::regclass
    ORDER BY 3 NULLS LAST;
$$;

-- Create the day partitions of history from p_now's UTC day to p_days days
-- later, where none covers them yet; the number created. Rows of such a day
-- already in the default partition move into its new partition. A partition
-- is built as a table of its own and then attached: ATTACH takes only a
-- SHARE UPDATE EXCLUSIVE lock on history, so runs keep writing their history
-- meanwhile (CREATE TABLE ... PARTITION OF would block them). SECURITY
-- DEFINER: a worker role without DDL rights runs it as the schema's owner.
CREATE FUNCTION history_partitions_ensure(p_now timestamptz, p_days integer DEFAULT 3)
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path FROM CURRENT
-- Waiting longer for a lock would hold up every writer queued behind it;
-- the next maintenance pass tries again.
SET lock_timeout = '2s'
AS $$
DECLARE
    v_day  date;
    v_from timestamptz;
    v_to   timestamptz;
    v_name text;
    v_made integer := 0;
BEGIN
    -- Two maintainers at once would collide on the same partition.
    PERFORM pg_advisory_xact_lock(hashtext('perdure.history_partitions:' || current_schema()));
    FOR v_day IN
        SELECT d::date
        FROM generate_series((p_now AT TIME ZONE 'UTC')::date,
                             (p_now AT TIME ZONE 'UTC')::date + greatest(p_days, 0),
                             interval '1 day') AS d
    LOOP
        v_from := v_day::timestamp AT TIME ZONE 'UTC';
        v_to := (v_day + 1)::timestamp AT TIME ZONE 'UTC';
        CONTINUE WHEN EXISTS (SELECT 1 FROM history_partitions() p
                              WHERE NOT p.is_default
                                AND coalesce(p.from_at, '-infinity') < v_to
                                AND p.to_at > v_from);
        v_name := 'history_p' || to_char(v_day, 'YYYYMMDD');
        EXECUTE format('CREATE TABLE %I (LIKE history)', v_name);
        -- Hold writers to the default partition back while its rows of this
        -- day move, so that none is left behind for ATTACH to trip on.
        LOCK TABLE history_default IN SHARE ROW EXCLUSIVE MODE;
        EXECUTE format('WITH moved AS (DELETE FROM history_default WHERE at >= %L AND at < %L '
                       'RETURNING *) INSERT INTO %I SELECT * FROM moved', v_from, v_to, v_name);
        EXECUTE format('ALTER TABLE history ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
                       v_name, v_from, v_to);
        v_made := v_made + 1;
    END LOOP;
    RETURN v_made;
END
$$;

-- Drop the oldest partition of history that ends at or before p_before, if
-- any; its name (NULL when there is none). Called once per partition, each
-- in its own short transaction. The entries of runs still in the runs table
-- (a run that waits for weeks, one that finished after the cutoff, one not
-- pruned yet) are kept: the partition is detached, their rows go back
-- through history and land in the default partition, then it is dropped.
-- Such runs were created before the partition's end, which the
-- runs_created_at_idx range finds. SECURITY DEFINER, as above.
CREATE FUNCTION history_partition_drop(p_before timestamptz)
RETURNS text
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path FROM CURRENT
SET lock_timeout = '2s'
AS $$
DECLARE
    v_part record;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('perdure.history_partitions:' || current_schema()));
    SELECT p.name, p.to_at INTO v_part
    FROM history_partitions() p
    WHERE NOT p.is_default AND p.to_at <= p_before
    ORDER BY p.to_at
    LIMIT 1;
    IF v_part.name IS NULL THEN
        RETURN NULL;
    END IF;
    EXECUTE format('ALTER TABLE history DETACH PARTITION %I', v_part.name);
    EXECUTE format('INSERT INTO history OVERRIDING SYSTEM VALUE SELECT * FROM %I h '
                   'WHERE h.run_id IN (SELECT r.id FROM runs r WHERE r.created_at < %L)',
                   v_part.name, v_part.to_at);
    EXECUTE format('DROP TABLE %I', v_part.name);
    RETURN v_part.name;
END
$$;

-- Only roles granted EXECUTE (the owner, a worker role through
-- `perdure migrate --grant-to`) may change partitions.
REVOKE EXECUTE ON FUNCTION history_partitions_ensure(timestamptz, integer) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION history_partition_drop(timestamptz) FROM PUBLIC;

SELECT history_partitions_ensure(now(), 1);

-- 3. Archive ---------------------------------------------------------------
-- LIKE copies columns, types and NOT NULL, not CHECK constraints or
-- defaults: an archived row is kept as it was.

CREATE TABLE archive_runs (LIKE runs, PRIMARY KEY (id));
CREATE INDEX archive_runs_created_at_idx ON archive_runs (created_at DESC, id DESC);
-- Keys are not unique here: once a run is archived its key may start a new run.
CREATE INDEX archive_runs_key_idx ON archive_runs (key) WHERE key IS NOT NULL;
CREATE TABLE archive_steps (LIKE steps, PRIMARY KEY (run_id, position));
CREATE TABLE archive_history (LIKE history);
CREATE INDEX archive_history_run_id_idx ON archive_history (run_id, id);
CREATE TABLE archive_signals (LIKE signals);
CREATE INDEX archive_signals_run_id_idx ON archive_signals (run_id, id);
CREATE TABLE archive_events (LIKE events, PRIMARY KEY (run_id, key));
CREATE TABLE archive_streams (LIKE streams, PRIMARY KEY (run_id, key, seq));
