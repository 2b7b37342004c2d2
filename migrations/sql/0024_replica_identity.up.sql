-- Replica identity, and the oldest release that may run on the schema. {{schema}} is replaced by
-- the target schema.

-- The process that holds a replica's row: a random id of its own (incarnation), which every
-- heartbeat of the process must find there, and who it is (host and pid), for the error that
-- refuses a second process with the same ReplicaID. locked: it keeps the advisory lock of its id
-- on a session of its own (its LISTEN connection), which dies with its process; a process under
-- Config.PollOnly keeps none, and only its heartbeat says whether it lives. Nullable: a replica
-- of a release before this one writes its row without them.
ALTER TABLE {{schema}}.replica_heartbeats ADD COLUMN IF NOT EXISTS incarnation uuid;
ALTER TABLE {{schema}}.replica_heartbeats ADD COLUMN IF NOT EXISTS holder text;
ALTER TABLE {{schema}}.replica_heartbeats ADD COLUMN IF NOT EXISTS locked boolean;

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
