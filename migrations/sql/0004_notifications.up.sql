-- Lifecycle notifications: a claim per execution and event phase, and an outbox of deliveries.
-- {{schema}} is replaced by the quoted schema name. Idempotent, like every migration here.

-- Retry bumps the failure phase, which re-arms the failure notification.
ALTER TABLE {{schema}}.executions ADD COLUMN IF NOT EXISTS failure_phase integer NOT NULL DEFAULT 0;

-- Exactly one row per execution, event and phase: inserted with ON CONFLICT DO NOTHING in the
-- transaction of the state change that caused it, whichever replicas race.
CREATE TABLE IF NOT EXISTS {{schema}}.notification_claims (
    execution_id    text        NOT NULL REFERENCES {{schema}}.executions (id) ON DELETE CASCADE,
    event           text        NOT NULL,
    phase           integer     NOT NULL,
    idempotency_key text        NOT NULL UNIQUE,
    claimed_at      timestamptz NOT NULL,
    PRIMARY KEY (execution_id, event, phase)
);

-- One row per claim and target (the Go handler, or a webhook URL), written with the claim. A
-- delivery is taken FOR UPDATE SKIP LOCKED and held while it is sent: a replica that dies
-- mid-delivery releases it to the others.
CREATE TABLE IF NOT EXISTS {{schema}}.notification_deliveries (
    id              bigserial   PRIMARY KEY,
    idempotency_key text        NOT NULL REFERENCES {{schema}}.notification_claims (idempotency_key) ON DELETE CASCADE,
    target          text        NOT NULL,
    state           text        NOT NULL DEFAULT 'PENDING',
    attempts        integer     NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL,
    last_error      text,
    delivered_at    timestamptz,
    created_at      timestamptz NOT NULL,
    CONSTRAINT notification_deliveries_state_check CHECK (state IN ('PENDING', 'DELIVERED', 'DEAD'))
);
CREATE INDEX IF NOT EXISTS notification_deliveries_pending_idx
    ON {{schema}}.notification_deliveries (next_attempt_at, id) WHERE state = 'PENDING';
CREATE INDEX IF NOT EXISTS notification_deliveries_key_idx
    ON {{schema}}.notification_deliveries (idempotency_key);
