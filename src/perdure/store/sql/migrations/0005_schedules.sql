-- perdure schema, version 5: schedules.
--
-- A schedule starts a run of a workflow at every tick of a cron expression,
-- read in an explicit time zone. Every worker ticks the due schedules; each
-- one locks the schedule's row (FOR UPDATE SKIP LOCKED), starts the runs of
-- its due ticks and advances next_tick in one transaction, so two workers
-- never start the same tick. The run's key, schedule:<name>:<tick in UTC>,
-- is the backstop: starting a tick twice returns the same run.
CREATE TABLE schedules (
    name        text        PRIMARY KEY,
    -- A cron expression: 5 fields, 6 with seconds last (croniter's form), or
    -- an alias such as @hourly. Checked by the code before it is written.
    cron        text        NOT NULL,
    -- An IANA time zone name (Europe/Paris); the cron is read on its wall clock.
    timezone    text        NOT NULL,
    -- The workflow each tick starts (its newest registered version), and its input.
    workflow    text        NOT NULL,
    input       jsonb       NOT NULL,
    -- What to do with ticks missed while no worker ran (or while paused):
    -- 'latest' starts the most recent one, 'all' every one (at most
    -- max_catchup, the most recent), 'skip' none.
    catchup     text        NOT NULL CHECK (catchup IN ('latest', 'all', 'skip')),
    max_catchup integer     NOT NULL CHECK (max_catchup >= 1),
    -- 'code': declared with @app.schedule and written by every worker that
    -- starts; 'api': added with app.add_schedule (or the CLI).
    source      text        NOT NULL CHECK (source IN ('code', 'api')),
    paused      boolean     NOT NULL DEFAULT false,
    -- The first tick not yet started. A tick is started once, by whichever
    -- worker advances this past it.
    next_tick   timestamptz NOT NULL,
    -- The last tick started, and its run.
    last_tick   timestamptz,
    last_run_id uuid,
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL
);

-- What the tickers read: the due schedules, and the next tick of all.
CREATE INDEX schedules_next_tick_idx ON schedules (next_tick) WHERE NOT paused;

-- The schedule that started a run, and the tick it covers (what a report
-- reads to know its period); NULL for runs started otherwise.
ALTER TABLE runs ADD COLUMN schedule text;
ALTER TABLE runs ADD COLUMN scheduled_at timestamptz;
CREATE INDEX runs_schedule_idx ON runs (schedule, scheduled_at DESC) WHERE schedule IS NOT NULL;
