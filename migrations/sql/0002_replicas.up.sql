-- Replica heartbeats, and views for operators. {{schema}} is replaced by the quoted schema name.
-- Idempotent, like every migration here.

-- One row per live replica, upserted every ReplicaHeartbeatInterval. A replica whose row is older
-- than its own ReplicaStaleAfter (stale_after_ms), or missing, has its RUNNING work abandoned, and
-- so has work it claimed before its started_at (a restart under the same replica id).
CREATE TABLE IF NOT EXISTS {{schema}}.replica_heartbeats (
    replica_id     text        PRIMARY KEY,
    last_heartbeat timestamptz NOT NULL,
    started_at     timestamptz NOT NULL,
    graphs         text[]      NOT NULL DEFAULT '{}',
    -- the replica's own ReplicaStaleAfter: the sweepers judge it by this
    stale_after_ms bigint      NOT NULL
);

-- Running computations, with the age of their last heartbeat.
CREATE OR REPLACE VIEW {{schema}}.running_computations AS
SELECT c.id, c.execution_id, c.graph_key, c.node, c.attempt, c.max_attempts, c.replica_id,
       c.claimed_at, c.last_heartbeat_at,
       now() - c.last_heartbeat_at  AS heartbeat_age,
       c.heartbeat_deadline - now() AS heartbeat_deadline_in,
       c.deadline - now()           AS deadline_in
FROM {{schema}}.computations c
WHERE c.state = 'RUNNING';

-- Replicas that stopped heartbeating, by their own ReplicaStaleAfter, with the work they hold.
CREATE OR REPLACE VIEW {{schema}}.stale_replicas AS
SELECT r.replica_id, r.last_heartbeat, now() - r.last_heartbeat AS heartbeat_age, r.started_at, r.graphs,
       (SELECT count(*) FROM {{schema}}.computations c
        WHERE c.state = 'RUNNING' AND c.replica_id = r.replica_id) AS running
FROM {{schema}}.replica_heartbeats r
WHERE r.last_heartbeat < now() - r.stale_after_ms * interval '1 millisecond';

-- Abandonments of the last hour, with their audit reason.
CREATE OR REPLACE VIEW {{schema}}.reclaim_history AS
SELECT c.id, c.execution_id, c.graph_key, c.node, c.attempt, c.max_attempts, c.replica_id,
       c.error AS reason, c.claimed_at, c.finished_at AS abandoned_at,
       EXISTS (SELECT 1 FROM {{schema}}.computations n
               WHERE n.execution_id = c.execution_id AND n.node = c.node AND n.id > c.id) AS retried
FROM {{schema}}.computations c
WHERE c.state = 'ABANDONED' AND c.finished_at > now() - interval '1 hour';

CREATE INDEX IF NOT EXISTS computations_abandoned_idx ON {{schema}}.computations (finished_at)
    WHERE state = 'ABANDONED';
