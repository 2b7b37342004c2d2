-- Promotion indexes: a promotion pass reads what it can promote, not everything that waits.
-- {{schema}} is replaced by the quoted schema name. Idempotent, like every migration here.

-- The due attempts that wait for no key and no limit (a retry's backoff, a tick), oldest first.
-- Through computations_pending_idx, their promotion read every gated attempt that waits before
-- the first of them: 10,000 rows when 10,000 gated attempts waited.
CREATE INDEX IF NOT EXISTS computations_pending_ungated_idx ON {{schema}}.computations (run_at, id)
    WHERE state = 'PENDING' AND concurrency_key IS NULL AND max_parallel IS NULL;
-- The waiting attempts of each node with a parallel limit and no key, oldest first: promotion
-- takes the first few of each node that has room. computations_pending_key_idx does the same for
-- the keys.
CREATE INDEX IF NOT EXISTS computations_pending_limited_idx ON {{schema}}.computations (graph_key, node, run_at, id)
    WHERE state = 'PENDING' AND concurrency_key IS NULL AND max_parallel IS NOT NULL;
