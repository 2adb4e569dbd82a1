-- perdure schema, version 7: run lineage, for restart and fork.
--
-- app.restart(run) starts a new run of the same workflow version with the
-- same input; app.fork(run, from_step=...) does the same and copies the
-- original's checkpoints before that step into the new run, so they are
-- replayed, not executed again. The new run names its original here. These
-- are plain columns, not foreign keys: retention may delete or archive the
-- original while its restarts and forks live on.
ALTER TABLE runs ADD COLUMN restarted_from uuid;
ALTER TABLE runs ADD COLUMN forked_from uuid;
-- The step a fork executes again from: its name, as given to app.fork.
ALTER TABLE runs ADD COLUMN fork_step text;

-- "Which runs came from this one?" for the CLI and the dashboard: partial,
-- so runs that were started normally (nearly all) cost these indexes nothing.
CREATE INDEX runs_restarted_from_idx ON runs (restarted_from) WHERE restarted_from IS NOT NULL;
CREATE INDEX runs_forked_from_idx ON runs (forked_from) WHERE forked_from IS NOT NULL;
