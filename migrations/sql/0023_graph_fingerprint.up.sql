-- The identity of each graph version: the fingerprint of its definition (its nodes, their kinds,
-- gates and options, and the graph's options) and the description it hashes, as graph.Description
-- encodes it. A replica that serves a changed graph under a recorded version is refused at New,
-- told what changed (persistence/graphs.go: RecordGraphs). {{schema}} is replaced by the quoted
-- schema name. Idempotent, like every migration here.
--
-- A table of its own, not columns of graph_versions: the previous release reads graph_versions
-- with SELECT * into a struct that fails on a column it does not know, and its replicas still
-- run against this schema in a rolling deploy. They keep upserting graph_versions, and never
-- touch this table. A version that they recorded has no row here: the first replica of a
-- release that knows fingerprints records its own.
CREATE TABLE IF NOT EXISTS {{schema}}.graph_fingerprints (
    graph_name    text        NOT NULL,
    graph_version text        NOT NULL,
    fingerprint   text        NOT NULL, -- hex SHA-256 of the description
    description   jsonb       NOT NULL,
    recorded_at   timestamptz NOT NULL, -- when a replica recorded it first, or took the version over
    PRIMARY KEY (graph_name, graph_version)
);
