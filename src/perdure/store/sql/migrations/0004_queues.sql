-- perdure schema, version 4: queue settings.
--
-- One row per queue that has settings. A queue needs no row to exist: a
-- workflow's queue is just a name on its tasks, and a queue without a row has
-- no limits. Settings are nullable columns, NULL meaning "no limit", so later
-- settings (a priority, a rate limit) are added as columns without touching
-- existing rows.
CREATE TABLE queues (
    name               text        PRIMARY KEY,
    -- At most this many tasks of the queue are claimed at once, across every
    -- worker. Enforced in the claim under this row's lock.
    concurrency        integer     CHECK (concurrency >= 1),
    -- At most this many tasks of the queue are claimed at once by one worker.
    worker_concurrency integer     CHECK (worker_concurrency >= 1),
    created_at         timestamptz NOT NULL,
    updated_at         timestamptz NOT NULL
);
