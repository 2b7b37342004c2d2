-- The archived executions. {{schema}} is replaced by the quoted schema name. Idempotent, like every
-- migration here.

-- The sweep cancels the waiting attempts of archived executions, which archiving could not: it
-- finds the archived executions in this partial index, instead of reading every execution,
-- finished or not, at each pass.
CREATE INDEX IF NOT EXISTS executions_archived_idx ON {{schema}}.executions (id)
    WHERE archived_at IS NOT NULL;
