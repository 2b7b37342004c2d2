-- Notifications that no replica's configuration can lose, and events that keep what they announce.
-- {{schema}} is replaced by the quoted schema name. Idempotent, like every migration here.

-- The deliveries each replica can make, as "event target" ("execution.failed handler",
-- "execution.completed https://..."). A claim queues a delivery for every target that any replica
-- lists for its event, so that the claimer's own configuration does not decide where it goes.
ALTER TABLE {{schema}}.replica_heartbeats ADD COLUMN IF NOT EXISTS targets text[] NOT NULL DEFAULT '{}';

-- The nodes that had used up their attempts when the failure was claimed, as a JSON array of
-- {"node", "attempts", "error"}: a Retry before the delivery does not empty the event.
ALTER TABLE {{schema}}.notification_claims ADD COLUMN IF NOT EXISTS failed_nodes jsonb;
