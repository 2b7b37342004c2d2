-- More room for the revision bumps. {{schema}} is replaced by the quoted schema name.
-- Idempotent, like every migration here.
-- An execution's row is updated at its claim and at its outcome, each a HOT update only with room
-- on its page for the new version (0013 set 70). At 70, 1.52–1.56 of the 2 updates per execution
-- were HOT in journey bench -n 20000; at 50, all of them: each other one wrote an entry in every
-- index of the table. It applies to the pages written from now on.
ALTER TABLE {{schema}}.executions SET (fillfactor = 50);
