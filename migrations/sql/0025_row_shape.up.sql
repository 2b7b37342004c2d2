-- The row shape of release 2: one row per (execution, node), which holds the node's value and its
-- current attempt, where release 1 kept a values row per node, a computations row per attempt,
-- and wrote the execution's revision on every change. {{schema}} is replaced by the target schema.
--
-- A one-node execution writes five rows: its executions row, its input's node row, and its
-- compute node's row three times (made ready, claimed, completed). Attempts move to the attempts
-- table only when a later attempt of their node replaces them (a retry after a failure or an
-- abandonment, a recomputation, a Retry); a replaced or cleared value moves to value_history, as
-- before. The execution's revision is the greatest of its rows' (each row carries the revision of
-- its last change) and of executions.revision, which only archiving and unarchiving write.
--
-- Every per-execution row carries the execution's lane: a number from 0 to 63, written in the id
-- (see persistence/lanes.go), and every primary key and unique index leads with it, so that the
-- tables can be distributed by lane (Citus). An id made before lanes reads as the lane its
-- characters happen to spell, which is as good as any.
--
-- Release 1's replicas cannot run on this: the schema's oldest release becomes 2, and they refuse
-- it. The migration refuses to run while any replica is live: stop them, then start release 2.

-- Not beside a live replica: release 1's would fail at every write from the commit on. (A replica
-- that died counts as live until its stale-after has passed.) Nothing is changed.
DO $$
DECLARE live text;
BEGIN
    SELECT string_agg(replica_id, ', ' ORDER BY replica_id) INTO live FROM {{schema}}.replica_heartbeats
    WHERE last_heartbeat >= now() - stale_after_ms * interval '1 millisecond';
    IF live IS NOT NULL THEN
        RAISE EXCEPTION 'migration 0025 (the row shape) cannot run beside the replicas of an earlier release, and '
            'replica(s) % are live in schema %: stop them, then start this release again. Deploy it as a stop-and-start '
            '(on Kubernetes, strategy Recreate); a replica that was killed counts as live until its ReplicaStaleAfter '
            '(20 s by default) has passed', live, current_schema();
    END IF;
END $$;

CREATE OR REPLACE FUNCTION pg_temp.lane_of(id text) RETURNS smallint LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN length(id) < 20 THEN 0 ELSE
        ((greatest(strpos('0123456789ABCDEFGHJKMNPQRSTVWXYZ', substr(id, length(id) - 9, 1)) - 1, 0) * 32
        + greatest(strpos('0123456789ABCDEFGHJKMNPQRSTVWXYZ', substr(id, length(id) - 8, 1)) - 1, 0)) % 64) END::smallint
$$;

-- No foreign keys: an execution is never deleted, and a key checked at each insert of a node row
-- would lock its execution's row once more, on the hot path. (A distributed table's foreign keys
-- would have to lead with the lane, too.)
ALTER TABLE {{schema}}."values" DROP CONSTRAINT IF EXISTS values_execution_id_fkey;
ALTER TABLE {{schema}}.computations DROP CONSTRAINT IF EXISTS computations_execution_id_fkey;
ALTER TABLE {{schema}}.value_history DROP CONSTRAINT IF EXISTS value_history_execution_id_fkey;
ALTER TABLE {{schema}}.requests DROP CONSTRAINT IF EXISTS requests_execution_id_fkey;
ALTER TABLE {{schema}}.notification_claims DROP CONSTRAINT IF EXISTS notification_claims_execution_id_fkey;
ALTER TABLE {{schema}}.notification_deliveries DROP CONSTRAINT IF EXISTS notification_deliveries_idempotency_key_fkey;

-- Executions: the lane, and no revision written on the hot path.
ALTER TABLE {{schema}}.executions ADD COLUMN IF NOT EXISTS lane smallint;
UPDATE {{schema}}.executions SET lane = pg_temp.lane_of(id) WHERE lane IS NULL;
ALTER TABLE {{schema}}.executions ALTER COLUMN lane SET NOT NULL;
ALTER TABLE {{schema}}.executions DROP CONSTRAINT executions_pkey;
ALTER TABLE {{schema}}.executions ADD PRIMARY KEY (lane, id);
-- A key is held once per graph, across lanes (executions_key_idx, as before). A keyed Start puts its
-- execution in the lane of its key, so that a distributed table can keep the key's uniqueness in
-- one lane; one PostgreSQL keeps it across lanes, for the keys of executions started before lanes.

-- Nodes: one row per node that has a value or an attempt.
CREATE TABLE {{schema}}.nodes (
    lane                 smallint    NOT NULL,
    execution_id         text        NOT NULL,
    node                 text        NOT NULL,
    graph_key            text        NOT NULL,
    -- the execution's revision at the row's last change, and when
    rev                  bigint      NOT NULL,
    changed_at           timestamptz NOT NULL,
    -- the value, NULL when unset or cleared; hseq is its place among the execution's history
    value                jsonb,
    metadata             jsonb,
    value_rev            bigint,
    set_at               timestamptz,
    hseq                 bigint      NOT NULL DEFAULT 0,
    -- the current attempt, NULL for a node that never had one (an input)
    attempt_id           bigint,
    state                text,
    attempt              integer,
    max_attempts         integer,
    replica_id           text,
    claim_token          uuid,
    run_at               timestamptz,
    claimed_at           timestamptz,
    deadline             timestamptz,
    heartbeat_deadline   timestamptz,
    last_heartbeat_at    timestamptz,
    abandon_after_ms     bigint,
    heartbeat_timeout_ms bigint,
    computed_with        jsonb,
    error                text,
    concurrency_key      text,
    max_parallel         integer,
    created_at           timestamptz,
    finished_at          timestamptz,
    available_at         timestamptz,
    traceparent          text,
    PRIMARY KEY (lane, execution_id, node),
    CHECK (state IS NULL OR state IN ('PENDING', 'AVAILABLE', 'RUNNING', 'SUCCESS', 'FAILED', 'ABANDONED', 'CANCELED'))
) WITH (fillfactor = 50); -- room for the heartbeats' HOT updates, and the completion's

-- The attempts that later attempts of their node replaced.
CREATE TABLE {{schema}}.attempts (
    lane                 smallint    NOT NULL,
    execution_id         text        NOT NULL,
    node                 text        NOT NULL,
    graph_key            text        NOT NULL,
    attempt_id           bigint      NOT NULL,
    state                text        NOT NULL,
    attempt              integer     NOT NULL,
    max_attempts         integer     NOT NULL,
    replica_id           text,
    claim_token          uuid,
    run_at               timestamptz NOT NULL,
    claimed_at           timestamptz,
    deadline             timestamptz,
    heartbeat_deadline   timestamptz,
    last_heartbeat_at    timestamptz,
    abandon_after_ms     bigint      NOT NULL,
    heartbeat_timeout_ms bigint      NOT NULL,
    computed_with        jsonb       NOT NULL,
    error                text,
    concurrency_key      text,
    max_parallel         integer,
    created_at           timestamptz NOT NULL,
    finished_at          timestamptz,
    available_at         timestamptz,
    traceparent          text,
    PRIMARY KEY (lane, execution_id, attempt_id)
);

-- The values' history: its order is hseq, per execution.
ALTER TABLE {{schema}}.value_history ADD COLUMN IF NOT EXISTS lane smallint;
ALTER TABLE {{schema}}.value_history ADD COLUMN IF NOT EXISTS hseq bigint;
WITH seq AS (
    SELECT execution_id, id, row_number() OVER (PARTITION BY execution_id ORDER BY id) AS hseq FROM (
        SELECT execution_id, id FROM {{schema}}.value_history
        UNION ALL SELECT execution_id, history_id FROM {{schema}}."values") u)
UPDATE {{schema}}.value_history h SET lane = pg_temp.lane_of(h.execution_id), hseq = seq.hseq
FROM seq WHERE seq.execution_id = h.execution_id AND seq.id = h.id;

-- A node's row keeps its last place in the history (that of its value, or of its clearing), with
-- the revision and time of that change: an input that was cleared has a row too.
INSERT INTO {{schema}}.nodes (lane, execution_id, node, graph_key, rev, changed_at, value, metadata, value_rev, set_at, hseq,
    attempt_id, state, attempt, max_attempts, replica_id, claim_token, run_at, claimed_at, deadline, heartbeat_deadline,
    last_heartbeat_at, abandon_after_ms, heartbeat_timeout_ms, computed_with, error, concurrency_key, max_parallel,
    created_at, finished_at, available_at, traceparent)
WITH newest AS (
    SELECT DISTINCT ON (execution_id, node) * FROM {{schema}}.computations ORDER BY execution_id, node, id DESC),
seq AS (
    SELECT execution_id, node, revision, changed_at,
        row_number() OVER (PARTITION BY execution_id ORDER BY id) AS hseq FROM (
        SELECT execution_id, node, id, revision, changed_at FROM {{schema}}.value_history
        UNION ALL SELECT execution_id, node, history_id, revision, set_at FROM {{schema}}."values") u),
last AS (
    SELECT DISTINCT ON (execution_id, node) * FROM seq ORDER BY execution_id, node, hseq DESC),
keys AS (
    SELECT execution_id, node FROM last UNION SELECT execution_id, node FROM newest)
SELECT pg_temp.lane_of(k.execution_id), k.execution_id, k.node, e.graph_name || '@' || e.graph_version,
    coalesce(l.revision, 0), coalesce(l.changed_at, c.finished_at, c.created_at),
    v.value, v.metadata, v.revision, v.set_at, coalesce(l.hseq, 0),
    c.id, c.state, c.attempt, c.max_attempts, c.replica_id, c.claim_token, c.run_at, c.claimed_at, c.deadline,
    c.heartbeat_deadline, c.last_heartbeat_at, c.abandon_after_ms, c.heartbeat_timeout_ms, c.computed_with, c.error,
    c.concurrency_key, c.max_parallel, c.created_at, c.finished_at, c.available_at, c.traceparent
FROM keys k
JOIN {{schema}}.executions e ON e.id = k.execution_id
LEFT JOIN last l ON l.execution_id = k.execution_id AND l.node = k.node
LEFT JOIN {{schema}}."values" v ON v.execution_id = k.execution_id AND v.node = k.node
LEFT JOIN newest c ON c.execution_id = k.execution_id AND c.node = k.node;

INSERT INTO {{schema}}.attempts (lane, execution_id, node, graph_key, attempt_id, state, attempt, max_attempts, replica_id,
    claim_token, run_at, claimed_at, deadline, heartbeat_deadline, last_heartbeat_at, abandon_after_ms,
    heartbeat_timeout_ms, computed_with, error, concurrency_key, max_parallel, created_at, finished_at, available_at,
    traceparent)
SELECT pg_temp.lane_of(c.execution_id), c.execution_id, c.node, c.graph_key, c.id, c.state, c.attempt, c.max_attempts,
    c.replica_id, c.claim_token, c.run_at, c.claimed_at, c.deadline, c.heartbeat_deadline, c.last_heartbeat_at,
    c.abandon_after_ms, c.heartbeat_timeout_ms, c.computed_with, c.error, c.concurrency_key, c.max_parallel,
    c.created_at, c.finished_at, c.available_at, c.traceparent
FROM {{schema}}.computations c
WHERE EXISTS (SELECT 1 FROM {{schema}}.computations n WHERE n.execution_id = c.execution_id AND n.node = c.node AND n.id > c.id);

DROP VIEW IF EXISTS {{schema}}.running_computations;
DROP VIEW IF EXISTS {{schema}}.stale_replicas;
DROP VIEW IF EXISTS {{schema}}.reclaim_history;
DROP TABLE {{schema}}."values";
DROP TABLE {{schema}}.computations;

ALTER TABLE {{schema}}.value_history ALTER COLUMN lane SET NOT NULL;
ALTER TABLE {{schema}}.value_history ALTER COLUMN hseq SET NOT NULL;
ALTER TABLE {{schema}}.value_history DROP CONSTRAINT value_history_pkey;
ALTER TABLE {{schema}}.value_history DROP COLUMN id;
ALTER TABLE {{schema}}.value_history ADD PRIMARY KEY (lane, execution_id, hseq);
DROP INDEX IF EXISTS {{schema}}.value_history_execution_idx;

-- The attempts waiting and running, for the claims, the gates and the sweeps. Finished ones are
-- in no index but the primary key and the finished_at ones (retention, insights): a claim or a
-- sweep reads the active attempts alone, however many finished.
CREATE INDEX nodes_claim_idx ON {{schema}}.nodes (graph_key, run_at, attempt_id) WHERE state = 'AVAILABLE';
CREATE INDEX nodes_running_replica_idx ON {{schema}}.nodes (replica_id) WHERE state = 'RUNNING';
CREATE INDEX nodes_pending_idx ON {{schema}}.nodes (run_at, attempt_id) WHERE state = 'PENDING';
CREATE INDEX nodes_pending_ungated_idx ON {{schema}}.nodes (run_at, attempt_id)
    WHERE state = 'PENDING' AND concurrency_key IS NULL AND max_parallel IS NULL;
CREATE INDEX nodes_pending_key_idx ON {{schema}}.nodes (concurrency_key, run_at, attempt_id)
    WHERE state = 'PENDING' AND concurrency_key IS NOT NULL;
CREATE INDEX nodes_pending_limited_idx ON {{schema}}.nodes (graph_key, node, run_at, attempt_id)
    WHERE state = 'PENDING' AND concurrency_key IS NULL AND max_parallel IS NOT NULL;
CREATE INDEX nodes_active_key_idx ON {{schema}}.nodes (concurrency_key)
    WHERE state IN ('AVAILABLE', 'RUNNING') AND concurrency_key IS NOT NULL;
CREATE INDEX nodes_active_node_idx ON {{schema}}.nodes (graph_key, node)
    WHERE state IN ('AVAILABLE', 'RUNNING') AND max_parallel IS NOT NULL;
CREATE INDEX nodes_finished_idx ON {{schema}}.nodes (finished_at)
    WHERE state IN ('SUCCESS', 'FAILED', 'ABANDONED', 'CANCELED');
CREATE INDEX nodes_abandoned_idx ON {{schema}}.nodes (finished_at) WHERE state = 'ABANDONED';
CREATE INDEX attempts_finished_idx ON {{schema}}.attempts (finished_at);
CREATE INDEX attempts_abandoned_idx ON {{schema}}.attempts (finished_at) WHERE state = 'ABANDONED';

-- Notifications and requests carry the lane of their execution.
ALTER TABLE {{schema}}.notification_claims ADD COLUMN IF NOT EXISTS lane smallint;
UPDATE {{schema}}.notification_claims SET lane = pg_temp.lane_of(execution_id);
ALTER TABLE {{schema}}.notification_claims ALTER COLUMN lane SET NOT NULL;
ALTER TABLE {{schema}}.notification_claims DROP CONSTRAINT notification_claims_pkey;
ALTER TABLE {{schema}}.notification_claims DROP CONSTRAINT notification_claims_idempotency_key_key;
ALTER TABLE {{schema}}.notification_claims ADD PRIMARY KEY (lane, execution_id, event, phase);
CREATE UNIQUE INDEX notification_claims_key_idx ON {{schema}}.notification_claims (lane, idempotency_key);

ALTER TABLE {{schema}}.notification_deliveries ADD COLUMN IF NOT EXISTS lane smallint;
UPDATE {{schema}}.notification_deliveries d SET lane = c.lane
FROM {{schema}}.notification_claims c WHERE c.idempotency_key = d.idempotency_key;
UPDATE {{schema}}.notification_deliveries SET lane = 0 WHERE lane IS NULL;
ALTER TABLE {{schema}}.notification_deliveries ALTER COLUMN lane SET NOT NULL;
ALTER TABLE {{schema}}.notification_deliveries DROP CONSTRAINT notification_deliveries_pkey;
ALTER TABLE {{schema}}.notification_deliveries ADD PRIMARY KEY (lane, id);
DROP INDEX IF EXISTS {{schema}}.notification_deliveries_key_idx;
CREATE INDEX notification_deliveries_key_idx ON {{schema}}.notification_deliveries (lane, idempotency_key);

ALTER TABLE {{schema}}.requests ADD COLUMN IF NOT EXISTS lane smallint;
UPDATE {{schema}}.requests SET lane = pg_temp.lane_of(execution_id);
ALTER TABLE {{schema}}.requests ALTER COLUMN lane SET NOT NULL;
ALTER TABLE {{schema}}.requests DROP CONSTRAINT requests_pkey;
ALTER TABLE {{schema}}.requests ADD PRIMARY KEY (lane, id);

-- The seeds' monitoring views, on the new tables.
CREATE VIEW {{schema}}.running_computations AS
SELECT n.attempt_id AS id, n.execution_id, n.graph_key, n.node, n.attempt, n.max_attempts, n.replica_id,
       n.claimed_at, n.last_heartbeat_at,
       now() - n.last_heartbeat_at  AS heartbeat_age,
       n.heartbeat_deadline - now() AS heartbeat_deadline_in,
       n.deadline - now()           AS deadline_in
FROM {{schema}}.nodes n
WHERE n.state = 'RUNNING';

CREATE VIEW {{schema}}.stale_replicas AS
SELECT r.replica_id, r.last_heartbeat, now() - r.last_heartbeat AS heartbeat_age, r.started_at, r.graphs,
       (SELECT count(*) FROM {{schema}}.nodes n
        WHERE n.state = 'RUNNING' AND n.replica_id = r.replica_id) AS running
FROM {{schema}}.replica_heartbeats r
WHERE r.last_heartbeat < now() - r.stale_after_ms * interval '1 millisecond';

-- An abandoned attempt is retried when a later attempt of its node exists: then it is in the
-- attempts table, and its node's row holds the later one.
CREATE VIEW {{schema}}.reclaim_history AS
SELECT a.attempt_id AS id, a.execution_id, a.graph_key, a.node, a.attempt, a.max_attempts, a.replica_id,
       a.error AS reason, a.claimed_at, a.finished_at AS abandoned_at, true AS retried
FROM {{schema}}.attempts a
WHERE a.state = 'ABANDONED' AND a.finished_at > now() - interval '1 hour'
UNION ALL
SELECT n.attempt_id, n.execution_id, n.graph_key, n.node, n.attempt, n.max_attempts, n.replica_id,
       n.error, n.claimed_at, n.finished_at, false
FROM {{schema}}.nodes n
WHERE n.state = 'ABANDONED' AND n.finished_at > now() - interval '1 hour';

-- Every attempt, the replaced ones and each node's current one, and every value, as release 1's
-- tables held them: for the operators' queries (and the tests' reads). The runtime reads the
-- tables.
CREATE VIEW {{schema}}.computations AS
SELECT a.attempt_id AS id, a.execution_id, a.graph_key, a.node, a.state, a.attempt, a.max_attempts, a.replica_id,
       a.claim_token, a.run_at, a.claimed_at, a.deadline, a.heartbeat_deadline, a.last_heartbeat_at, a.abandon_after_ms,
       a.heartbeat_timeout_ms, a.computed_with, a.error, a.concurrency_key, a.created_at, a.finished_at, a.max_parallel,
       a.traceparent, a.available_at, a.lane
FROM {{schema}}.attempts a
UNION ALL
SELECT n.attempt_id, n.execution_id, n.graph_key, n.node, n.state, n.attempt, n.max_attempts, n.replica_id,
       n.claim_token, n.run_at, n.claimed_at, n.deadline, n.heartbeat_deadline, n.last_heartbeat_at, n.abandon_after_ms,
       n.heartbeat_timeout_ms, n.computed_with, n.error, n.concurrency_key, n.created_at, n.finished_at, n.max_parallel,
       n.traceparent, n.available_at, n.lane
FROM {{schema}}.nodes n
WHERE n.attempt_id IS NOT NULL;

CREATE VIEW {{schema}}."values" AS
SELECT n.execution_id, n.node, n.value, n.metadata, n.value_rev AS revision, n.set_at, n.hseq AS history_id, n.lane
FROM {{schema}}.nodes n
WHERE n.value_rev IS NOT NULL;

UPDATE {{schema}}.schema_release SET oldest = 2,
    why = 'release 2 keeps a row per node (the tables nodes and attempts) where release 1 kept values and computations';

DROP FUNCTION pg_temp.lane_of(text);
