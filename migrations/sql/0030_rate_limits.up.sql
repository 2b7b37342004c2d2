-- Rate limits (graph.RateLimit): the rate key of a rate-limited attempt (RateKey's value, '' for a
-- node without one), NULL for an attempt that no rate limits. {{schema}} is replaced by the target
-- schema. The limit itself (n starts within a window) is the graph's, which the promotion reads
-- from the definition it serves. A replica of a release before this one names the columns it
-- reads, and runs on; but it would promote a rate-limited attempt as one that waits for nothing:
-- give a graph a RateLimit once every replica runs this release.
ALTER TABLE {{schema}}.nodes ADD COLUMN IF NOT EXISTS rate_key text;
ALTER TABLE {{schema}}.attempts ADD COLUMN IF NOT EXISTS rate_key text;

-- The promotion's walk: from rate key to rate key of a node (a loose index scan), then the oldest
-- due attempts of each key with room in its window.
CREATE INDEX IF NOT EXISTS nodes_pending_rated_idx ON {{schema}}.nodes (graph_key, node, rate_key, run_at, attempt_id)
    WHERE state = 'PENDING' AND rate_key IS NOT NULL;

-- The attempts that take room in a key's window: those made AVAILABLE and not yet claimed (at
-- 'infinity', since they may start at any moment), and those claimed, at their claim. A window's
-- count reads the entries after its start alone, however many attempts started before it. An
-- attempt that never started (canceled, paused, failed by its key) and is not AVAILABLE has no entry.
CREATE INDEX IF NOT EXISTS nodes_rate_started_idx ON {{schema}}.nodes
    (graph_key, node, rate_key, (CASE WHEN state = 'AVAILABLE' THEN 'infinity'::timestamptz ELSE claimed_at END))
    WHERE rate_key IS NOT NULL AND (state = 'AVAILABLE' OR claimed_at IS NOT NULL);
-- An attempt that a later one replaced (a failure retried, a recomputation) started when it did.
CREATE INDEX IF NOT EXISTS attempts_rate_started_idx ON {{schema}}.attempts (graph_key, node, rate_key, claimed_at)
    WHERE rate_key IS NOT NULL AND claimed_at IS NOT NULL;

-- The promotion of attempts that wait for their time alone walks this one, which leaves out the
-- rate-limited attempts: through nodes_pending_ungated_idx it would read past every one of them
-- that is due, at each pass. nodes_pending_ungated_idx stays for the release before this one,
-- whose promotion names no rate_key; a later release drops it.
CREATE INDEX IF NOT EXISTS nodes_pending_free_idx ON {{schema}}.nodes (run_at, attempt_id)
    WHERE state = 'PENDING' AND concurrency_key IS NULL AND max_parallel IS NULL AND rate_key IS NULL;
