-- perdure schema, version 18: the log records of each step attempt.
--
-- While a step attempt runs, the worker keeps the Python logging records it
-- emits (bounded: 200 records and 64 KiB per attempt, then "truncated") and
-- writes them here as one row per attempt that logged something, after the
-- attempt ended (completed, failed, retrying or snoozed). An attempt that
-- logged nothing writes nothing. The rows go with their run (ON DELETE
-- CASCADE): retention and `perdure prune` delete them with it.
CREATE TABLE step_logs (
    run_id     uuid        NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    position   integer     NOT NULL,
    attempt    integer     NOT NULL,
    name       text        NOT NULL,
    worker_id  text,
    status     text        NOT NULL,
    -- [{"at": iso time, "level": "INFO", "logger": "name", "message": "..."}, ...]
    records    jsonb       NOT NULL,
    truncated  boolean     NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL,
    PRIMARY KEY (run_id, position, attempt)
);
