-- Keyed starts: at most one unarchived execution of a graph holds a key. {{schema}} is replaced
-- by the quoted schema name. Idempotent, like every migration here.

-- The key a Start gave the execution (journey.WithKey, WithKeys, graph.Singleton); NULL for none.
-- A nullable column without a default: adding it rewrites nothing.
ALTER TABLE {{schema}}.executions ADD COLUMN IF NOT EXISTS key text;

-- The database, not a read before the write, keeps a key to one unarchived execution of a graph
-- (of any version): a keyed Start inserts with ON CONFLICT DO NOTHING on this index, and a
-- concurrent one waits for the first to commit, then finds its execution. Archiving takes the
-- row out of the index, which frees the key; unarchiving puts it back, and fails if another
-- execution holds the key by then. Partial: an unkeyed Start writes no entry. No statement of the
-- hot path changes key, graph_name or archived_at (0003's and 0009's indexes name it already), so
-- the revision bumps of 0013 and 0019 stay HOT. Key first: a search by key alone (the dashboard's,
-- journey executions list -key) reads it too.
CREATE UNIQUE INDEX IF NOT EXISTS executions_key_idx ON {{schema}}.executions (key, graph_name)
    WHERE key IS NOT NULL AND archived_at IS NULL;

-- The archived executions that held a key, for a search by key that includes them: beside the
-- index above, it finds every execution that ever held a key without reading every archived
-- execution. A keyed Start writes no entry here; archiving, which is no HOT update, writes one.
CREATE INDEX IF NOT EXISTS executions_archived_key_idx ON {{schema}}.executions (key)
    WHERE key IS NOT NULL AND archived_at IS NOT NULL;
