-- The watermark of the insights' roll, kept without special privileges. {{schema}} is replaced by
-- the quoted schema name. Idempotent, like every migration here.
--
-- The roll marks the minutes of the executions created and of the attempts ended since its
-- watermark, which must stay behind every transaction that may yet commit such rows, stamped with
-- the time it began. It read when each began from pg_stat_activity.xact_start, which is NULL for
-- other roles' sessions unless the reader has pg_read_all_stats: a dashboard running as another
-- role moved the watermark past open transactions, whose rows were then never counted. Each roll
-- now records the transactions it sees in progress in pg_locks, which every role can read, and a
-- transaction that the roll before did not see began after that one looked
-- (persistence/insights.go: nextWatch). insight_watermark is left to older releases.
--
-- insight_cells gains a measure, with no change to the table:
--   failed: n executions that failed for good at node (its newest attempt failed or was
--           abandoned; an execution fails at the first such node), in the minute "at". Such an
--           execution ends there: its last value is no measure "ended".
CREATE TABLE IF NOT EXISTS {{schema}}.insight_watch (
    one       boolean       PRIMARY KEY DEFAULT true CHECK (one),
    -- The next roll marks the rows stamped since.
    watermark timestamptz   NOT NULL,
    -- When the last roll looked at the transactions in progress.
    at        timestamptz   NOT NULL,
    -- The transactions it saw, by virtual transaction id; when each began at the earliest; and
    -- the oldest transaction id each can write with (32 bits).
    vxids     text[]        NOT NULL,
    since     timestamptz[] NOT NULL,
    xmins     bigint[]      NOT NULL
);
