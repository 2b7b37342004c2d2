-- What operators need: the graph versions that replicas serve, the requests of the command line,
-- and an index to page through every execution. {{schema}} is replaced by the quoted schema name.
-- Idempotent, like every migration here.

-- One row per graph version that a replica has served, upserted by each replica at start: its
-- nodes (as a JSON array of {"name", "kind", "gate", "upstream", "targets"}) and its Mermaid
-- flowchart, so that a graph can be shown without its Go code. A new version gets a new row,
-- and the rows together show how a graph evolved.
CREATE TABLE IF NOT EXISTS {{schema}}.graph_versions (
    graph_name    text        NOT NULL,
    graph_version text        NOT NULL,
    nodes         jsonb       NOT NULL,
    mermaid       text        NOT NULL,
    first_seen_at timestamptz NOT NULL,
    last_seen_at  timestamptz NOT NULL,
    PRIMARY KEY (graph_name, graph_version)
);

-- Actions asked for from outside the runtime (journey retry, archive, unarchive), which need the
-- graph's Go code: a replica that serves the graph carries each out, in the transaction that
-- marks it done, as soon as the NOTIFY that announces it arrives (or at its next sweep).
CREATE TABLE IF NOT EXISTS {{schema}}.requests (
    id           bigserial   PRIMARY KEY,
    execution_id text        NOT NULL REFERENCES {{schema}}.executions (id) ON DELETE CASCADE,
    graph_key    text        NOT NULL,
    action       text        NOT NULL,
    node         text,
    requested_at timestamptz NOT NULL,
    done_at      timestamptz,
    replica_id   text,       -- the replica that carried it out
    error        text,       -- why it could not be carried out
    CONSTRAINT requests_action_check CHECK (action IN ('retry', 'archive', 'unarchive'))
);
CREATE INDEX IF NOT EXISTS requests_open_idx ON {{schema}}.requests (graph_key, id) WHERE done_at IS NULL;
CREATE INDEX IF NOT EXISTS requests_execution_idx ON {{schema}}.requests (execution_id, id);

-- Listing every execution, newest first, keyset-paged by (created_at, id).
CREATE INDEX IF NOT EXISTS executions_created_idx ON {{schema}}.executions (created_at, id);

-- The executions that have failed (a failure claimed in their current failure phase), for the
-- listings filtered by state.
CREATE INDEX IF NOT EXISTS notification_claims_failed_idx ON {{schema}}.notification_claims (execution_id, phase)
    WHERE event = 'execution.failed';
