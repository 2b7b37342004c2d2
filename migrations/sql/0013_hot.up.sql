-- Room for the revision bumps. {{schema}} is replaced by the quoted schema name. Idempotent, like
-- every migration here.

-- An execution's row is updated at each claim and each outcome, for its revision, and no index
-- covers the columns those updates change: with room left on its page, each new version is a
-- HOT update, which writes no index entry. Full pages sent every one of them to another page,
-- with a new entry in each of the table's indexes. It applies to the pages written from now on.
ALTER TABLE {{schema}}.executions SET (fillfactor = 70);
