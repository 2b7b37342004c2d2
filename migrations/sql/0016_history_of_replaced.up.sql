-- The history holds what values were, not what they are: a node's current value is its row in
-- "values", which History reads beside value_history. {{schema}} is replaced by the quoted schema
-- name; search_path is that schema. Idempotent, like every migration here.
-- Each value was written twice, to "values" and to value_history: two of the ten rows that a
-- one-node execution wrote (journey bench -n 20000: row_writes_per_execution=10.00). Now a value
-- goes to value_history only when a write replaces or clears it, and keeps its place there: its
-- history_id, drawn from value_history's sequence when it was written.
ALTER TABLE {{schema}}."values" ADD COLUMN IF NOT EXISTS history_id bigint;
-- A value written before: its history row is the newest of its node, if that row holds it.
UPDATE {{schema}}."values" v SET history_id = h.id
FROM (SELECT DISTINCT ON (execution_id, node) id, execution_id, node, value, metadata, revision
    FROM {{schema}}.value_history ORDER BY execution_id, node, id DESC) h
WHERE v.history_id IS NULL AND h.execution_id = v.execution_id AND h.node = v.node
    AND h.revision = v.revision AND h.value = v.value AND h.metadata IS NOT DISTINCT FROM v.metadata;
DELETE FROM {{schema}}.value_history h USING {{schema}}."values" v WHERE h.id = v.history_id;
-- A value whose history row retention pruned is older than what the history kept: it goes first.
UPDATE {{schema}}."values" SET history_id = -nextval('value_history_id_seq') WHERE history_id IS NULL;
ALTER TABLE {{schema}}."values" ALTER COLUMN history_id SET DEFAULT nextval('value_history_id_seq'),
    ALTER COLUMN history_id SET NOT NULL;
