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
	b.exec(t, `INSERT INTO {s}.notification_claims (execution_id, event, phase, idempotency_key, claimed_at) VALUES (?, 'execution.completed', 0, ?, now())`, id, key)
	b.exec(t, `INSERT INTO {s}.notification_deliveries (idempotency_key, target, state, attempts, next_attempt_at, delivered_at, created_at)
		VALUES (?, 'handler', 'DELIVERED', 1, now(), ?, now())`, key, b.clock.Now())
	count := func(table string) int {
		var n int
		require.NoError(t, b.db.NewRaw(b.store.q("SELECT count(*) FROM {s}."+table)).Scan(ctx, &n))
		return n
	}
	require.Equal(t, 5, count("computations"))
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
	require.Equal(t, 1, count("computations"), "only the newest attempt is kept")
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

// A pass examines a bounded window of the finished attempts, however many old ones are kept as
// the newest of their node, and the next pass goes on from where it stopped. Once at the
// cutoff, it starts again from the oldest, and finds an attempt that was superseded meanwhile.
func TestRetentionExaminesABoundedWindowPerPass(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	ids := b.ready(t, 30)
	for range ids {
		require.NoError(t, b.store.Complete(ctx, b.claimOne(t, "r1"), json.RawMessage(`1`), nil))
	}
	b.clock.Advance(25 * time.Hour)
	cutoff := b.clock.Now().Add(-24 * time.Hour)
	pass := func() (deleted, examined int) {
		t.Helper()
		deleted, examined, err := b.store.pruneAttempts(ctx, cutoff, 2)
		require.NoError(t, err)
		return deleted, examined
	}
	deleted, examined := pass()
	require.Equal(t, [2]int{0, 2 * pruneScanFactor}, [2]int{deleted, examined}, "a pass examines at most Limit×%d attempts", pruneScanFactor)
	deleted, examined = pass()
	require.Equal(t, [2]int{0, 30 - 2*pruneScanFactor}, [2]int{deleted, examined}, "the next pass goes on to the cutoff")

	old := b.latest(t, ids[5], "y")
	_, err := b.store.SetValues(ctx, ids[5], map[string]json.RawMessage{"x": json.RawMessage(`2`)}, nil, nil)
	require.NoError(t, err)
	require.NoError(t, b.store.Complete(ctx, b.claimOne(t, "r1"), json.RawMessage(`2`), nil))
	deleted, examined = pass()
	require.Equal(t, [2]int{1, 2 * pruneScanFactor}, [2]int{deleted, examined}, "the pass after the cutoff starts again from the oldest")
	comps, err := b.store.Computations(ctx, ids[5])
	require.NoError(t, err)
	require.Len(t, comps, 1)
	require.NotEqual(t, old.ID, comps[0].ID, "the superseded attempt is the one deleted")
}

// (j) What a write reads of an execution's attempts does not grow with its age: the newest
// attempt of each node, read from the index, whatever the number of older ones.
func TestWritesReadOneAttemptPerNode(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	id := b.start(t, b.g, map[string]any{"x": 1})
	b.exec(t, `INSERT INTO {s}.computations (execution_id, graph_key, node, state, attempt, max_attempts, run_at,
			abandon_after_ms, heartbeat_timeout_ms, created_at, finished_at)
		SELECT ?, 'store@v1', 'y', 'SUCCESS', 1, 2, now(), 60000, 30000, now(), now() FROM generate_series(1, 5000)`, id)
	b.exec(t, `ANALYZE {s}.computations`)

	var plan []map[string]any
	var raw string
	require.NoError(t, b.db.DB.QueryRowContext(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+b.store.q(latestAttemptsQuery),
		[]string{id}, []string{"store@v1"}, []string{"y"}).Scan(&raw))
	require.NoError(t, json.Unmarshal([]byte(raw), &plan))
	read := rowsRead(plan[0]["Plan"].(map[string]any), "computations")
	require.LessOrEqual(t, read, 1.0, "one row read per node, not one per attempt ever made")
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
