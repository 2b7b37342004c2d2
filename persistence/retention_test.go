package persistence

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// (j) The sweeper deletes what retention lets go, and keeps what the semantics need: the newest
// attempt of each node, the values, and the notification claims.
func TestRetentionKeepsWhatTheSemanticsNeed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	id := b.start(t, b.g, nil)
	var last int64
	for x := 1; x <= 5; x++ {
		_, err := b.store.SetValues(ctx, id, map[string]json.RawMessage{"x": json.RawMessage(fmt.Sprint(x))}, nil, nil)
		require.NoError(t, err)
		c := b.claimOne(t, "r1")
		require.NoError(t, b.store.Complete(ctx, c, json.RawMessage(fmt.Sprint(10*x)), nil))
		last = c.ID
	}
	key := id + ":execution.completed:0"
	b.exec(t, `INSERT INTO {s}.notification_claims (lane, execution_id, event, phase, idempotency_key, claimed_at)
		VALUES (?, ?, 'execution.completed', 0, ?, now())`, LaneOf(id), id, key)
	b.exec(t, `INSERT INTO {s}.notification_deliveries (lane, idempotency_key, target, state, attempts, next_attempt_at, delivered_at, created_at)
		VALUES (?, ?, 'handler', 'DELIVERED', 1, now(), ?, now())`, LaneOf(id), key, b.clock.Now())
	count := func(table string) int {
		var n int
		require.NoError(t, b.db.NewRaw(b.store.q("SELECT count(*) FROM {s}."+table)).Scan(ctx, &n))
		return n
	}
	require.Equal(t, 4, count("attempts"), "the attempts that the next ones replaced")
	require.Equal(t, 8, count("value_history"), "the values replaced: x and y, four times each")

	sweep := func() SweepResult {
		res, err := b.store.Sweep(ctx, SweepOptions{Holder: "r1", Limit: 2, Retention: 24 * time.Hour})
		require.NoError(t, err)
		return res
	}
	b.clock.Advance(23 * time.Hour)
	require.Zero(t, sweep().Deleted, "nothing is old enough yet")

	b.clock.Advance(2 * time.Hour)
	for sweep().Deleted > 0 { // a pass deletes at most Limit rows per table
	}
	require.Zero(t, count("attempts"), "only the newest attempt is kept, in its node's row")
	require.Equal(t, last, b.latest(t, id, "y").ID, "and it is the newest")
	require.Zero(t, count("value_history"))
	require.Zero(t, count("notification_deliveries"))
	require.Equal(t, 1, count("notification_claims"), "claims keep the event exactly once")
	vals, err := b.store.Values(ctx, id)
	require.NoError(t, err)
	require.Equal(t, int64(50), vals.Int("y"), "values are never pruned")

	// The execution goes on as before.
	_, err = b.store.SetValues(ctx, id, map[string]json.RawMessage{"x": json.RawMessage(`6`)}, nil, nil)
	require.NoError(t, err)
	c := b.claimOne(t, "r1")
	require.NoError(t, b.store.Complete(ctx, c, json.RawMessage(`60`), nil))
	vals, err = b.store.Values(ctx, id)
	require.NoError(t, err)
	require.Equal(t, int64(60), vals.Int("y"))
}

// (j) What a write reads of an execution does not grow with its age: one row per node, whatever
// the number of attempts replaced, which it does not read.
func TestWritesReadOneRowPerNode(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	id := b.start(t, b.g, map[string]any{"x": 1})
	b.exec(t, `INSERT INTO {s}.attempts (lane, execution_id, node, graph_key, attempt_id, state, attempt, max_attempts, run_at,
			abandon_after_ms, heartbeat_timeout_ms, computed_with, created_at, finished_at)
		SELECT ?, ?, 'y', 'store@v1', g, 'SUCCESS', 1, 2, now(), 60000, 30000, '{}', now(), now() FROM generate_series(1, 5000) g`,
		LaneOf(id), id)
	b.exec(t, `ANALYZE {s}.attempts`)

	var plan []map[string]any
	var raw string
	require.NoError(t, b.db.DB.QueryRowContext(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+b.store.q(`SELECT `+cols("n", nodeColumns)+`
		FROM unnest($1::smallint[], $2::text[]) AS k(lane, id) JOIN {s}.nodes n ON n.lane = k.lane AND n.execution_id = k.id`),
		[]int16{LaneOf(id)}, []string{id}).Scan(&raw))
	require.NoError(t, json.Unmarshal([]byte(raw), &plan))
	require.LessOrEqual(t, rowsRead(plan[0]["Plan"].(map[string]any), "nodes"), 2.0, "one row read per node: x and y")
	require.Zero(t, rowsRead(plan[0]["Plan"].(map[string]any), "attempts"), "no attempt replaced is read")
}

// rowsRead sums the rows the plan's scans of table returned.
func rowsRead(node map[string]any, table string) float64 {
	n := 0.0
	if node["Relation Name"] == table {
		n += node["Actual Rows"].(float64) * node["Actual Loops"].(float64)
	}
	children, _ := node["Plans"].([]any)
	for _, c := range children {
		n += rowsRead(c.(map[string]any), table)
	}
	return n
}

// A pass of retention alone (PruneOnly), as the sweeper runs while retention catches up, deletes
// what retention lets go and leaves the rest of a pass to the timed passes: an expired attempt
// stays RUNNING until a full pass abandons it.
func TestPruneOnlyPassDeletesAndAbandonsNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	id := b.start(t, b.g, nil)
	for x := 1; x <= 3; x++ {
		_, err := b.store.SetValues(ctx, id, map[string]json.RawMessage{"x": json.RawMessage(fmt.Sprint(x))}, nil, nil)
		require.NoError(t, err)
	}
	running := b.claimOne(t, "dead") // a replica without a heartbeat: its work has expired
	b.clock.Advance(25 * time.Hour)

	res, err := b.store.Sweep(ctx, SweepOptions{Holder: "r1", Limit: 100, Retention: 24 * time.Hour, PruneOnly: true})
	require.NoError(t, err)
	require.Equal(t, 2, res.Deleted, "the two values of x replaced")
	require.Empty(t, res.Abandoned)
	require.Equal(t, StateRunning, b.latest(t, id, "y").State, "left to a full pass")

	res, err = b.store.Sweep(ctx, SweepOptions{Holder: "r1", Limit: 100, Retention: 24 * time.Hour})
	require.NoError(t, err)
	require.Len(t, res.Abandoned, 1)
	require.Equal(t, running.ID, res.Abandoned[0].ID)
}
