-- The rollup behind Insights. {{schema}} is replaced by the quoted schema name. Idempotent, like
-- every migration here.
--
-- Insights read per-minute cells instead of every execution, value and attempt: on 1,000,000
-- executions the direct reading took 16 s. No write of the hot path touches these tables. The
-- sweep lease holder, and each reading of Insights, brings the cells of the minutes that changed
-- up to date (persistence/insights.go: the roll).

-- One cell per graph version, minute in which the executions started, archived or not, measure,
-- node, and time "at": what those executions did. The measures:
--   executions: n executions started; the histogram of their time from start to last value.
--   reached:    n executions where node has a value; the histogram of the time to its first.
--   ended:      n executions whose last value is node's, written in the second "at".
--   ran:        n attempts of node that ran and ended, of which failed and abandoned; the
--               histogram of their run times.
--   finished:   n attempts that succeeded in the minute "at", failed and abandoned ones; the
--               histogram of the run times of them all.
-- A histogram is sparse: bins[i] holds counts[i] durations, bin b being [2^(b/4), 2^((b+1)/4))
-- microseconds.
CREATE TABLE IF NOT EXISTS {{schema}}.insight_cells (
    graph_name    text        NOT NULL,
    minute        timestamptz NOT NULL,
    graph_version text        NOT NULL,
    archived      boolean     NOT NULL,
    measure       text        NOT NULL,
    node          text        NOT NULL,
    at            timestamptz NOT NULL,
    n             bigint      NOT NULL,
    failed        bigint      NOT NULL,
    abandoned     bigint      NOT NULL,
    bins          smallint[],
    counts        bigint[],
    PRIMARY KEY (graph_name, minute, graph_version, archived, measure, node, at)
);

-- The minutes whose cells are out of date. Sets, Unsets, archiving, retries, moves and retention
-- add theirs (claimed false); the roll adds those of the executions created and the attempts
-- ended since its watermark, and claims the others, in short transactions, then brings the
-- claimed ones up to date and deletes them. A claimed row left by a crash is rolled next time.
CREATE TABLE IF NOT EXISTS {{schema}}.insight_marks (
    graph_name    text        NOT NULL,
    graph_version text        NOT NULL,
    minute        timestamptz NOT NULL,
    claimed       boolean     NOT NULL DEFAULT false,
    PRIMARY KEY (graph_name, graph_version, minute, claimed)
);

-- When the cells of a minute were last rolled, and how long that took: in the background, a
-- minute is rolled again only after ten times that, so that the minutes that many executions
-- keep changing cost the database a tenth of its time at most.
CREATE TABLE IF NOT EXISTS {{schema}}.insight_minutes (
    graph_name    text        NOT NULL,
    graph_version text        NOT NULL,
    minute        timestamptz NOT NULL,
    rolled_at     timestamptz NOT NULL,
    cost_ms       bigint      NOT NULL,
    PRIMARY KEY (graph_name, graph_version, minute)
);

-- The roll's watermark: the executions created and the attempts ended before it are marked.
CREATE TABLE IF NOT EXISTS {{schema}}.insight_watermark (
    one boolean     PRIMARY KEY DEFAULT true CHECK (one),
    at  timestamptz NOT NULL
);
