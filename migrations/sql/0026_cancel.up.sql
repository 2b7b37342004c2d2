-- Cancel (Runtime.Cancel): when and why an execution was canceled, and the reason a cancel
-- request carries. {{schema}} is replaced by the target schema. Releases before this one name
-- the columns they read, and run on: they do not know that an execution is canceled.
ALTER TABLE {{schema}}.executions ADD COLUMN IF NOT EXISTS canceled_at timestamptz;
ALTER TABLE {{schema}}.executions ADD COLUMN IF NOT EXISTS cancel_reason text;
CREATE INDEX IF NOT EXISTS executions_canceled_idx ON {{schema}}.executions (created_at) WHERE canceled_at IS NOT NULL;
ALTER TABLE {{schema}}.requests ADD COLUMN IF NOT EXISTS reason text;
-- A replica of a release before this one refuses a cancel request (unknown action), and marks it
-- done with that error: cancel from the CLI or the dashboard once every replica runs this one.
ALTER TABLE {{schema}}.requests DROP CONSTRAINT IF EXISTS requests_action_check;
ALTER TABLE {{schema}}.requests ADD CONSTRAINT requests_action_check CHECK (action IN ('retry', 'archive', 'unarchive', 'cancel'));
