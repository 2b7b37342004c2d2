-- Child executions (graph.Map, graph.Child). {{schema}} is replaced by the target schema.
--
-- A child knows its parent: the parent's id, the map node, the generation of the node that
-- started it (the attempt that first computed the node for its upstream values) and its place in
-- the list, as JSON (NULL for an execution that is no one's child). The index finds the children
-- of an execution, to cancel, pause or archive them with it.
ALTER TABLE {{schema}}.executions ADD COLUMN IF NOT EXISTS parent jsonb;
CREATE INDEX IF NOT EXISTS executions_parent_idx ON {{schema}}.executions ((parent->>'id')) WHERE parent IS NOT NULL;

-- A map node's progress: how many children its generation started, and how many have ended
-- (completed, failed for good, canceled). A child's end counts it in the transaction that claims
-- the child's event, which claims it once; the last one makes the node, WAITING meanwhile,
-- AVAILABLE again, to collect the results.
CREATE TABLE IF NOT EXISTS {{schema}}.map_progress (
    lane         smallint NOT NULL,
    execution_id text     NOT NULL,
    node         text     NOT NULL,
    gen          bigint   NOT NULL,
    sig          text     NOT NULL,
    total        integer  NOT NULL,
    done         integer  NOT NULL DEFAULT 0,
    PRIMARY KEY (lane, execution_id, node)
);

-- WAITING: a map node's attempt waits for its children, claimed by no one.
ALTER TABLE {{schema}}.nodes DROP CONSTRAINT IF EXISTS nodes_state_check;
ALTER TABLE {{schema}}.nodes ADD CONSTRAINT nodes_state_check
    CHECK (state IS NULL OR state IN ('PENDING', 'AVAILABLE', 'RUNNING', 'SUCCESS', 'FAILED', 'ABANDONED', 'CANCELED', 'PAUSED', 'WAITING'));
CREATE INDEX IF NOT EXISTS nodes_waiting_idx ON {{schema}}.nodes (execution_id) WHERE state = 'WAITING';
