-- perdure schema, version 6: queue features (priority kept across retries,
-- partition keys, rate limits, per-queue deduplication, debounce) and
-- searchable tags on runs.
--
-- Every new column is nullable or has a constant default, so adding it is a
-- catalog change that rewrites no table, on PostgreSQL 14 as on 18.

-- What the run was started with, kept on the run so that a retried run's new
-- task gets the same priority and partition key as its first one.
ALTER TABLE runs ADD COLUMN priority integer NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN partition_key text;
-- Per-queue deduplication: at most one run per (queue, dedup_key) waits to
-- start. The partial unique index holds only runs that have not started yet,
-- so a finished or running run does not block a new one with the same key.
-- A debounced start (start(..., debounce=)) collapses into that waiting run.
ALTER TABLE runs ADD COLUMN dedup_key text;
CREATE UNIQUE INDEX runs_dedup_key_idx ON runs (queue, dedup_key)
    WHERE dedup_key IS NOT NULL AND status = 'queued' AND started_at IS NULL;
-- Searchable attributes: a flat JSON object of strings, found with @>
-- (list_runs(tags=...), `perdure runs list --tag k=v`) through a GIN index.
-- jsonb_path_ops is smaller and faster than the default class for @>, the
-- only operator used. Partial: GIN would otherwise index every untagged run
-- as a NULL item, a cost on every start for nothing (@> is strict, so the
-- planner knows a match has tags).
ALTER TABLE runs ADD COLUMN tags jsonb;
CREATE INDEX runs_tags_idx ON runs USING gin (tags jsonb_path_ops) WHERE tags IS NOT NULL;

-- A task's partition key (its run's), counted against the queue's
-- partition_concurrency and, when rate_per_key is set, its rate limit.
ALTER TABLE tasks ADD COLUMN partition_key text;

-- The new queue settings. NULL is "no limit", as for the others.
ALTER TABLE queues ADD COLUMN partition_concurrency integer CHECK (partition_concurrency >= 1);
ALTER TABLE queues ADD COLUMN rate_limit integer CHECK (rate_limit >= 1);
ALTER TABLE queues ADD COLUMN rate_period double precision
    CHECK (rate_period > 0 AND rate_period <= 31536000);
ALTER TABLE queues ADD COLUMN rate_per_key boolean NOT NULL DEFAULT false;
ALTER TABLE queues ADD CONSTRAINT queues_rate_check CHECK ((rate_limit IS NULL) = (rate_period IS NULL));

-- The rate limit's sliding window: one row per task claimed from a
-- rate-limited queue, written by the claim under the queue's row lock and
-- deleted by a later claim once older than the period. It holds at most
-- rate_limit rows per queue (per key with rate_per_key) inside the window.
-- partition_key is '' for the whole queue (or a task without a key).
CREATE TABLE queue_starts (
    queue         text        NOT NULL,
    partition_key text        NOT NULL,
    started_at    timestamptz NOT NULL
);
CREATE INDEX queue_starts_idx ON queue_starts (queue, partition_key, started_at);
