-- Priorities (journey.WithPriority, graph.Priority): an execution's priority, which adds to each
-- node's and gives its attempts a head start in the queue of ready work (their run_at, earlier by
-- graph.PriorityStep a point). {{schema}} is replaced by the target schema. The default is that of
-- an execution started without one, so that a replica of the release before, which names no
-- priority, starts executions as it did.
ALTER TABLE {{schema}}.executions ADD COLUMN IF NOT EXISTS priority smallint NOT NULL DEFAULT 0;
