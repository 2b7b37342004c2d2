-- One state machine: a child's end is counted once, by the child's own writes. {{schema}} is
-- replaced by the target schema.
--
-- ended_at: when a child execution (graph.Map, graph.Child) last ended, as its parent's map node
-- counts it (it completed, failed for good, or was canceled or archived); NULL while it runs, and
-- for an execution that is no one's child. Each write of a child keeps it, and counts its change
-- in the node's progress in the same transaction.
ALTER TABLE {{schema}}.executions ADD COLUMN IF NOT EXISTS ended_at timestamptz;

-- The children of earlier releases: ended as those releases counted them, by their events.
UPDATE {{schema}}.executions e SET ended_at = coalesce(e.archived_at, e.canceled_at, e.updated_at)
WHERE e.parent IS NOT NULL AND e.ended_at IS NULL AND (e.archived_at IS NOT NULL OR e.canceled_at IS NOT NULL
    OR EXISTS (SELECT 1 FROM {{schema}}.notification_claims x WHERE x.lane = e.lane AND x.execution_id = e.id
        AND (x.event = 'execution.completed' OR x.event = 'execution.failed' AND x.phase = e.failure_phase)));

-- Each map node's progress, counted again from them: an earlier release counted a child twice if
-- it failed and then completed, and a child archived not at all.
UPDATE {{schema}}.map_progress SET done = 0;
WITH ends AS (
    SELECT parent->>'id' AS id, parent->>'node' AS node, (parent->>'gen')::bigint AS gen, count(*) AS n
    FROM {{schema}}.executions WHERE parent IS NOT NULL AND ended_at IS NOT NULL
    GROUP BY 1, 2, 3)
UPDATE {{schema}}.map_progress m SET done = ends.n FROM ends
WHERE m.execution_id = ends.id AND m.node = ends.node AND m.gen = ends.gen;

UPDATE {{schema}}.schema_release SET oldest = 3,
    why = 'release 3 counts the end of a child execution once, by its ended_at, where release 2 counted its events';
