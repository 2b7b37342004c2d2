-- What the dashboard's overview counts on an index. {{schema}} is replaced by the quoted schema
-- name. Idempotent, like every migration here.

-- The notification deliveries that were given up, counted by the overview.
CREATE INDEX IF NOT EXISTS notification_deliveries_dead_idx ON {{schema}}.notification_deliveries (id)
    WHERE state = 'DEAD';
