-- Gating (concurrency keys, parallel limits), tick wakeups, and the value history.
-- {{schema}} is replaced by the quoted schema name. Idempotent, like every migration here.

-- The node's MaxParallel, copied onto each attempt so that any replica can promote it, even one
-- that does not serve the graph.
ALTER TABLE {{schema}}.computations ADD COLUMN IF NOT EXISTS max_parallel integer;

CREATE INDEX IF NOT EXISTS computations_active_key_idx ON {{schema}}.computations (concurrency_key)
    WHERE state IN ('AVAILABLE', 'RUNNING') AND concurrency_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS computations_active_node_idx ON {{schema}}.computations (graph_key, node)
    WHERE state IN ('AVAILABLE', 'RUNNING') AND max_parallel IS NOT NULL;

-- When the execution must be advanced again without any write: the next tick that comes due.
ALTER TABLE {{schema}}.executions ADD COLUMN IF NOT EXISTS wake_at timestamptz;
CREATE INDEX IF NOT EXISTS executions_wake_idx ON {{schema}}.executions (wake_at)
    WHERE wake_at IS NOT NULL AND archived_at IS NULL;

-- Every change of every value, for History.
CREATE TABLE IF NOT EXISTS {{schema}}.value_history (
    id           bigserial   PRIMARY KEY,
    execution_id text        NOT NULL REFERENCES {{schema}}.executions (id) ON DELETE CASCADE,
    node         text        NOT NULL,
    value        jsonb,      -- NULL when the value was cleared
    metadata     jsonb,
    revision     bigint      NOT NULL,
    changed_at   timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS value_history_execution_idx ON {{schema}}.value_history (execution_id, id);
