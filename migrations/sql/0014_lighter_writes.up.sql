-- Less to write for each value, history row and attempt. {{schema}} is replaced by the quoted
-- schema name. Idempotent, like every migration here.

-- No foreign keys on the hot tables. Every insert into them ran a trigger that looked its
-- execution up and locked it: 11% of the buffers a computation read in journey bench -n 20000.
-- Nothing it checked could fail: the runtime writes these rows only in the transaction that holds
-- their execution's row, or creates it, and never deletes an execution (Archive keeps the row).
-- Whoever deletes an execution by hand deletes its rows from these tables too.
ALTER TABLE {{schema}}."values" DROP CONSTRAINT IF EXISTS values_execution_id_fkey;
ALTER TABLE {{schema}}.value_history DROP CONSTRAINT IF EXISTS value_history_execution_id_fkey;
ALTER TABLE {{schema}}.computations DROP CONSTRAINT IF EXISTS computations_execution_id_fkey;

-- No statement finds attempts by their deadline: the sweep reads every RUNNING attempt of the
-- served graphs, which computations_running_replica_idx lists as well. The index only cost each
-- claim one more entry to write.
DROP INDEX IF EXISTS {{schema}}.computations_running_deadline_idx;
