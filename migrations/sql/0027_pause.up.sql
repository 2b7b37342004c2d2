-- Pause (Runtime.Pause): when an execution was paused, the state of its waiting attempts while it
-- is (PAUSED, which no claim or promotion reads), and the requests that pause and resume.
-- {{schema}} is replaced by the target schema. A replica of a release before this one does not
-- know PAUSED: pause executions once every replica runs this release.
ALTER TABLE {{schema}}.executions ADD COLUMN IF NOT EXISTS paused_at timestamptz;
CREATE INDEX IF NOT EXISTS executions_paused_idx ON {{schema}}.executions (created_at) WHERE paused_at IS NOT NULL;
ALTER TABLE {{schema}}.nodes DROP CONSTRAINT IF EXISTS nodes_state_check;
ALTER TABLE {{schema}}.nodes ADD CONSTRAINT nodes_state_check
    CHECK (state IS NULL OR state IN ('PENDING', 'AVAILABLE', 'RUNNING', 'SUCCESS', 'FAILED', 'ABANDONED', 'CANCELED', 'PAUSED'));
ALTER TABLE {{schema}}.requests DROP CONSTRAINT IF EXISTS requests_action_check;
ALTER TABLE {{schema}}.requests ADD CONSTRAINT requests_action_check
    CHECK (action IN ('retry', 'archive', 'unarchive', 'cancel', 'pause', 'resume'));
-- A graph version paused (Runtime.PauseGraph): no replica claims its work until ResumeGraph. The
-- sweep finds the PAUSED attempts of versions that run again (revivePaused) in this index.
ALTER TABLE {{schema}}.graph_versions ADD COLUMN IF NOT EXISTS paused_at timestamptz;
CREATE INDEX IF NOT EXISTS nodes_paused_idx ON {{schema}}.nodes (graph_key) WHERE state = 'PAUSED';
