-- perdure schema, version 12: parallel steps found by position.
--
-- A run's parallel-step tasks by position: the worker that reached a gather
-- claims them in position order (step_claim_gathered) and a gather's park
-- looks each one up (step_fanout), so neither reads every task of the run,
-- which for a map over n items made both cost O(n) per batch or per item.
CREATE INDEX tasks_run_step_idx ON tasks (run_id, step_position) WHERE kind = 'step';
