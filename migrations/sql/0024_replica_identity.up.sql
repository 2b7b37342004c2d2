-- Replica identity, and the oldest release that may run on the schema. {{schema}} is replaced by
-- the target schema.

-- The process that holds a replica's row: a random id of its own (incarnation), which every
-- heartbeat of the process must find here, and who it is (host and pid), for the error that
-- refuses a second process with the same ReplicaID. locked: it keeps the advisory lock of its id
-- on a session of its own (its LISTEN connection), which dies with its process; a process under
-- Config.PollOnly keeps none, and only its heartbeat says whether it lives. A table of its own,
-- not columns of replica_heartbeats: releases before they named their columns read that table with
-- SELECT *, which fails on a column it does not know. A replica of a release before this one
-- heartbeats without a row here.
CREATE TABLE IF NOT EXISTS {{schema}}.replica_holders (
    replica_id  text    PRIMARY KEY,
    incarnation uuid    NOT NULL,
    holder      text    NOT NULL,
    locked      boolean NOT NULL
);

-- The oldest release of journey-go that may still run on this schema (persistence.Release): a
-- replica of an older one refuses to start, and stops claiming once it reads a higher number at a
-- heartbeat. A migration that changes what older releases read or write raises it, with why.
CREATE TABLE IF NOT EXISTS {{schema}}.schema_release (
    id boolean PRIMARY KEY DEFAULT true CHECK (id),
    oldest integer NOT NULL,
    why text NOT NULL
);
INSERT INTO {{schema}}.schema_release (oldest, why)
VALUES (1, 'release 1 records the oldest release that may run on the schema; the releases before it read only columns they name, and run on it too')
ON CONFLICT (id) DO NOTHING;
