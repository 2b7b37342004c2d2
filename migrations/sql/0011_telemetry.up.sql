-- Tracing and the claim's wait. {{schema}} is replaced by the quoted schema name. Idempotent, like
-- every migration here.

-- The W3C traceparent of the span of the write that created the attempt (a Start, a Set, the
-- completion of an upstream or failed attempt, an abandonment), NULL when that write was not
-- traced. The claim returns it, and the attempt's span links to it: a trace leads from a write on
-- one replica to the computation it caused on another. It goes in with the attempt's INSERT and
-- comes back with the claim: no statement of its own.
ALTER TABLE {{schema}}.computations ADD COLUMN IF NOT EXISTS traceparent text;

-- When the attempt last became AVAILABLE (created so, promoted, released or revived): the claim's
-- wait, a metric, runs from it to claimed_at.
ALTER TABLE {{schema}}.computations ADD COLUMN IF NOT EXISTS available_at timestamptz;
