-- The core tables of journey-go. {{schema}} is replaced by the quoted schema name.
-- Idempotent: bun/migrate marks a migration applied after its transaction commits, so a crash
-- in between runs it again.

CREATE TABLE IF NOT EXISTS {{schema}}.executions (
    id            text        PRIMARY KEY,
    graph_name    text        NOT NULL,
    graph_version text        NOT NULL,
    revision      bigint      NOT NULL DEFAULT 0,
    archived_at   timestamptz,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX IF NOT EXISTS executions_graph_idx ON {{schema}}.executions (graph_name, graph_version, created_at);

-- One row per execution and node: the node's current value.
CREATE TABLE IF NOT EXISTS {{schema}}."values" (
    execution_id text        NOT NULL REFERENCES {{schema}}.executions (id) ON DELETE CASCADE,
    node         text        NOT NULL,
    value        jsonb       NOT NULL,
    metadata     jsonb,
    revision     bigint      NOT NULL,
    set_at       timestamptz NOT NULL,
    PRIMARY KEY (execution_id, node)
);

-- One row per attempt of a computation.
CREATE TABLE IF NOT EXISTS {{schema}}.computations (
    id                   bigserial   PRIMARY KEY,
    execution_id         text        NOT NULL REFERENCES {{schema}}.executions (id) ON DELETE CASCADE,
    graph_key            text        NOT NULL,
    node                 text        NOT NULL,
    state                text        NOT NULL,
    attempt              integer     NOT NULL DEFAULT 1,
    max_attempts         integer     NOT NULL,
    replica_id           text,
    claim_token          uuid,
    run_at               timestamptz NOT NULL DEFAULT now(),
    claimed_at           timestamptz,
    deadline             timestamptz,
    heartbeat_deadline   timestamptz,
    last_heartbeat_at    timestamptz,
    abandon_after_ms     bigint      NOT NULL,
    heartbeat_timeout_ms bigint      NOT NULL,
    computed_with        jsonb       NOT NULL DEFAULT '{}',
    error                text,
    concurrency_key      text,
    created_at           timestamptz NOT NULL DEFAULT now(),
    finished_at          timestamptz,
    CONSTRAINT computations_state_check CHECK (
        state IN ('PENDING', 'AVAILABLE', 'RUNNING', 'SUCCESS', 'FAILED', 'ABANDONED', 'CANCELED')),
    CONSTRAINT computations_attempt_check CHECK (attempt >= 1 AND max_attempts >= 1)
);

-- Partial indexes on the active states: a claim, a sweep or a promotion costs the same whether the
-- table holds a thousand finished rows or ten million.
CREATE INDEX IF NOT EXISTS computations_available_idx ON {{schema}}.computations (graph_key, id)
    WHERE state = 'AVAILABLE';
CREATE INDEX IF NOT EXISTS computations_pending_idx ON {{schema}}.computations (run_at, id)
    WHERE state = 'PENDING';
CREATE INDEX IF NOT EXISTS computations_running_deadline_idx ON {{schema}}.computations (deadline)
    WHERE state = 'RUNNING';
CREATE INDEX IF NOT EXISTS computations_running_heartbeat_idx ON {{schema}}.computations (heartbeat_deadline)
    WHERE state = 'RUNNING';
CREATE INDEX IF NOT EXISTS computations_running_replica_idx ON {{schema}}.computations (replica_id)
    WHERE state = 'RUNNING';
CREATE INDEX IF NOT EXISTS computations_execution_idx ON {{schema}}.computations (execution_id, node, id);
