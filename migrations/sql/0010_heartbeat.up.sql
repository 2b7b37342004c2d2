-- One index fewer to write at each heartbeat. {{schema}} is replaced by the quoted schema name.
-- Idempotent, like every migration here.

-- No statement finds attempts by their heartbeat deadline: the sweep reads every RUNNING attempt
-- of the served graphs through another partial index, since a replica gone silent expires its
-- attempts whatever their deadlines. The index on heartbeat_deadline only cost every claim, and
-- every heartbeat of every running attempt (ten thousand rows a second, with ten thousand running
-- at a one-second interval), one more index entry to write.
DROP INDEX IF EXISTS {{schema}}.computations_running_heartbeat_idx;
