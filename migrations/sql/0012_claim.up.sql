-- The claim's index. {{schema}} is replaced by the quoted schema name. Idempotent, like every
-- migration here.

-- A claim takes the available attempts of a graph that have been due the longest: by run_at, then
-- id. No other index gives that order, so the claim's one prepared plan cannot wander onto the
-- primary key, as it could when it took them by id alone: statistics taken while most attempts
-- were AVAILABLE made a walk of the primary key, through every finished attempt, look as cheap.
CREATE INDEX IF NOT EXISTS computations_claim_idx ON {{schema}}.computations (graph_key, run_at, id)
    WHERE state = 'AVAILABLE';
DROP INDEX IF EXISTS {{schema}}.computations_available_idx;
