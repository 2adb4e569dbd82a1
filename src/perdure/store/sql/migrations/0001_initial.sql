-- perdure schema, version 1: workflows, runs, steps, tasks, workers, history.
--
-- The migrator runs this file inside one transaction with search_path set to the
-- target schema, so names here are unqualified and the schema stays configurable.
-- Statuses are text with CHECK constraints rather than enums: adding a status
-- later is then a constraint swap, not an ALTER TYPE that cannot run in a
-- transaction on older servers.

-- The workflow registry: what each worker's code defines. An App that lacks a
-- workflow in its own code validates `start` against this table.
CREATE TABLE workflows (
    name          text        NOT NULL,
    version       integer     NOT NULL,
    queue         text        NOT NULL,
    kind          text        NOT NULL DEFAULT 'function' CHECK (kind IN ('function', 'graph')),
    definition    jsonb       NOT NULL DEFAULT '{}'::jsonb,
    fingerprint   text,
    registered_at timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (name, version)
);

CREATE TABLE workers (
    id           text        PRIMARY KEY,
    host         text        NOT NULL,
    pid          integer     NOT NULL,
    queues       text[]      NOT NULL,
    workflows    text[]      NOT NULL,
    concurrency  integer     NOT NULL,
    status       text        NOT NULL DEFAULT 'running' CHECK (status IN ('running', 'stopped', 'lost')),
    started_at   timestamptz NOT NULL,
    heartbeat_at timestamptz NOT NULL,
    stopped_at   timestamptz
);

CREATE TABLE runs (
    id            uuid        PRIMARY KEY,
    workflow      text        NOT NULL,
    version       integer     NOT NULL,
    queue         text        NOT NULL,
    -- The caller's idempotency key: starting twice with one key returns one run.
    key           text        UNIQUE,
    status        text        NOT NULL CHECK (status IN
                      ('queued', 'running', 'waiting', 'paused', 'completed', 'failed', 'cancelled')),
    input         jsonb       NOT NULL,
    output        jsonb,
    error         jsonb,
    worker_id     text,
    parent_run_id uuid,
    created_at    timestamptz NOT NULL,
    started_at    timestamptz,
    completed_at  timestamptz,
    updated_at    timestamptz NOT NULL
);

-- Observability indexes, chosen for the queries dashboards run most: a time
-- range, a status over time, one worker's runs, one workflow's runs. Each is
-- ordered newest first so "the last N" is an index range scan, whatever the
-- number of finished runs behind it.
CREATE INDEX runs_created_at_idx ON runs (created_at DESC);
CREATE INDEX runs_status_created_at_idx ON runs (status, created_at DESC);
CREATE INDEX runs_worker_created_at_idx ON runs (worker_id, created_at DESC) WHERE worker_id IS NOT NULL;
CREATE INDEX runs_workflow_created_at_idx ON runs (workflow, created_at DESC);

-- Step checkpoints. (run_id, position) is the memo key: a step whose row is
-- 'completed' or 'failed' is never executed again in that run; 'retrying' rows
-- only carry the attempt count and last error between attempts.
CREATE TABLE steps (
    run_id       uuid        NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    position     integer     NOT NULL,
    name         text        NOT NULL,
    kind         text        NOT NULL DEFAULT 'step' CHECK (kind IN ('step', 'transaction')),
    status       text        NOT NULL CHECK (status IN ('completed', 'failed', 'retrying')),
    attempts     integer     NOT NULL,
    output       jsonb,
    error        jsonb,
    worker_id    text,
    started_at   timestamptz NOT NULL,
    completed_at timestamptz,
    PRIMARY KEY (run_id, position)
);

-- The claimable work. A task is "advance run R" (kind 'run') or, for parallel
-- branches, "execute step S of run R" (kind 'step'). Rows live only while the
-- work is pending or held: finishing a task deletes it, so this table stays
-- small however long the history grows.
CREATE TABLE tasks (
    id               bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id           uuid        NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    kind             text        NOT NULL DEFAULT 'run' CHECK (kind IN ('run', 'step')),
    step_position    integer,
    step_name        text,
    queue            text        NOT NULL,
    workflow         text        NOT NULL,
    version          integer     NOT NULL,
    priority         integer     NOT NULL DEFAULT 0,
    status           text        NOT NULL CHECK (status IN ('ready', 'claimed')),
    available_at     timestamptz NOT NULL,
    -- The fencing token: bumped by every claim. Every write a worker makes on
    -- the task carries (worker_id, attempt) in its WHERE clause.
    attempt          integer     NOT NULL DEFAULT 0,
    -- Failed executions of the workflow body, counted against its retry policy.
    failures         integer     NOT NULL DEFAULT 0,
    -- Leases that expired because their worker died or stalled.
    lapses           integer     NOT NULL DEFAULT 0,
    worker_id        text,
    claimed_at       timestamptz,
    lease_expires_at timestamptz,
    created_at       timestamptz NOT NULL
);

-- The claim index: only ready rows, in claim order. Finished work is deleted
-- and held work is not 'ready', so the index holds exactly the queue.
CREATE INDEX tasks_ready_idx ON tasks (queue, priority DESC, available_at, id) WHERE status = 'ready';
-- Held work, for heartbeats and the reaper. lease_expires_at is deliberately
-- left out of every index so that extending a lease is a HOT update.
CREATE INDEX tasks_claimed_idx ON tasks (worker_id) WHERE status = 'claimed';
CREATE INDEX tasks_run_id_idx ON tasks (run_id);

-- The append-only log of what happened to each run and step.
CREATE TABLE history (
    id            bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id        uuid        NOT NULL,
    at            timestamptz NOT NULL,
    event         text        NOT NULL,
    step_position integer,
    step_name     text,
    attempt       integer,
    worker_id     text,
    detail        jsonb
);
CREATE INDEX history_run_id_idx ON history (run_id, id);

-- Wake idle workers the moment work becomes claimable: a new task, a retry
-- that is due now, a task the reaper revived. The payload is the queue name;
-- NOTIFY folds identical payloads within one transaction. Tasks that become
-- due later are found by the worker's timer, not by a notification.
CREATE FUNCTION notify_task_ready() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify(TG_TABLE_SCHEMA || '_wakeup', NEW.queue);
    RETURN NULL;
END
$$;

CREATE TRIGGER tasks_notify_insert AFTER INSERT ON tasks
    FOR EACH ROW WHEN (NEW.status = 'ready' AND NEW.available_at <= now())
    EXECUTE FUNCTION notify_task_ready();

CREATE TRIGGER tasks_notify_update AFTER UPDATE OF status, available_at ON tasks
    FOR EACH ROW WHEN (NEW.status = 'ready' AND NEW.available_at <= now())
    EXECUTE FUNCTION notify_task_ready();
