-- Leases, retention and promotion indexes. {{schema}} is replaced by the quoted schema name.
-- Idempotent, like every migration here.

-- Time-bound leases, such as the sweep's: a holder renews its lease on each pass, and another
-- replica takes it over once it has expired. Unlike a lock held by a transaction or a session,
-- a lease held by a frozen process runs out.
CREATE TABLE IF NOT EXISTS {{schema}}.leases (
    name       text        PRIMARY KEY,
    holder     text        NOT NULL,
    expires_at timestamptz NOT NULL
);

-- Retention: the sweeper deletes old finished attempts, value history and delivered
-- notifications in batches, oldest first.
CREATE INDEX IF NOT EXISTS computations_finished_idx ON {{schema}}.computations (finished_at)
    WHERE state IN ('SUCCESS', 'FAILED', 'ABANDONED', 'CANCELED');
CREATE INDEX IF NOT EXISTS value_history_changed_idx ON {{schema}}.value_history (changed_at);
CREATE INDEX IF NOT EXISTS notification_deliveries_delivered_idx ON {{schema}}.notification_deliveries (delivered_at)
    WHERE state = 'DELIVERED';

-- Promotion looks at the oldest due attempt of each concurrency key, however many are blocked.
CREATE INDEX IF NOT EXISTS computations_pending_key_idx ON {{schema}}.computations (concurrency_key, run_at, id)
    WHERE state = 'PENDING' AND concurrency_key IS NOT NULL;
