-- What the dashboard's overview counts on an index. {{schema}} is replaced by the quoted schema
-- name. Idempotent, like every migration here.

-- The notification deliveries that were given up, counted by the overview.
CREATE INDEX IF NOT EXISTS notification_deliveries_dead_idx ON {{schema}}.notification_deliveries (id)
    WHERE state = 'DEAD';

-- The overview estimates the executions of each graph version from the planner's statistics. A
-- version belongs to one graph: without statistics on the pair, the planner multiplies the two
-- columns' frequencies and is off by a factor of up to four.
CREATE STATISTICS IF NOT EXISTS {{schema}}.executions_graph_stats (mcv, dependencies)
    ON graph_name, graph_version FROM {{schema}}.executions;
