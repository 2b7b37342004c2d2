package persistence

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A Set and an archiving neither create an execution nor end an attempt: they mark their minute,
// and the next roll brings its cells up to date, though it is long past the watermark.
func TestWritesMarkTheirMinuteForTheRoll(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	require.NoError(t, b.store.RecordGraphs(ctx, "replica-a", testIdentity, time.Minute))
	ids := make([]string, 3)
	for i := range ids {
		e, err := b.store.CreateExecution(ctx, b.g)
		require.NoError(t, err)
		ids[i] = e.ID
	}
	read := func() []int64 {
		ins, err := b.store.Insights(ctx, InsightsQuery{Graph: "store", Since: 24 * time.Hour}.WithDefaults())
		require.NoError(t, err)
		require.Zero(t, ins.Pending)
		return []int64{ins.Executions, ins.Nodes[0].Reached}
	}
	require.Equal(t, []int64{3, 0}, read())

	past := func() {
		b.clock.Advance(10 * time.Minute)
		left, err := b.store.RollInsights(ctx, "", time.Second)
		require.NoError(t, err)
		require.Zero(t, left)
	}
	past()
	_, err := b.store.SetValues(ctx, ids[0], map[string]json.RawMessage{"x": json.RawMessage(`1`)}, nil, nil)
	require.NoError(t, err)
	require.Equal(t, []int64{3, 1}, read())
	past()
	require.NoError(t, b.store.SetArchived(ctx, ids[1], true))
	require.Equal(t, []int64{2, 1}, read())
}

// In the background, the roll leaves the minute still filling and the one before, and a minute
// rolled again too soon for what its last roll cost; a reading rolls them all.
func TestBackgroundRollLeavesFillingAndCostlyMinutes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	require.NoError(t, b.store.RecordGraphs(ctx, "replica-a", testIdentity, time.Minute))
	e, err := b.store.CreateExecution(ctx, b.g)
	require.NoError(t, err)
	roll := func() int {
		left, err := b.store.RollInsights(ctx, "", RollInBackground)
		require.NoError(t, err)
		return left
	}
	cells := func() (n int) {
		require.NoError(t, b.db.NewRaw(b.store.q("SELECT count(*) FROM {s}.insight_cells")).Scan(ctx, &n))
		return n
	}
	require.Equal(t, 1, roll())
	require.Zero(t, cells())

	b.clock.Advance(3 * time.Minute)
	require.Zero(t, roll())
	require.Positive(t, cells())

	// The last roll of that minute "took" a minute: it waits ten.
	_, err = b.db.NewRaw(b.store.q("UPDATE {s}.insight_minutes SET cost_ms = 60000")).Exec(ctx)
	require.NoError(t, err)
	_, err = b.store.SetValues(ctx, e.ID, map[string]json.RawMessage{"x": json.RawMessage(`1`)}, nil, nil)
	require.NoError(t, err)
	require.Equal(t, 1, roll())
	ins, err := b.store.Insights(ctx, InsightsQuery{Graph: "store"}.WithDefaults())
	require.NoError(t, err)
	require.Zero(t, ins.Pending)
	require.EqualValues(t, 1, ins.Nodes[0].Reached)
	b.clock.Advance(10 * time.Minute)
	require.Zero(t, roll())
}

// A duration's bin, as the roll computes it, gives it back within 9%.
func TestHistogramBinsGiveDurationsBack(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, d := range []time.Duration{700 * time.Microsecond, 40 * time.Millisecond, time.Second, 90 * time.Minute, 240 * time.Hour} {
		var bin int
		require.NoError(t, b.db.NewRaw("SELECT "+binOf("? * interval '1 microsecond'"), d.Microseconds()).Scan(context.Background(), &bin))
		got := histogram{bin: 3}.quantile(0.5)
		require.InEpsilon(t, float64(d), float64(got), 0.09, "%v came back as %v (bin %d)", d, got, bin)
	}
	h := histogram{10: 50, 80: 45, 90: 5}
	require.Equal(t, histogram{10: 1}.quantile(1), h.quantile(0.5))
	require.Equal(t, histogram{80: 1}.quantile(1), h.quantile(0.95))
	require.Zero(t, histogram{}.quantile(0.5))
}

// A reading answers while another holds the roll's lock, without waiting for it, and says that
// its answer is not up to date; once the lock is free, it is.
func TestReadingDoesNotWaitForABusyRoll(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	require.NoError(t, b.store.RecordGraphs(ctx, "replica-a", testIdentity, time.Minute))
	_, err := b.store.CreateExecution(ctx, b.g)
	require.NoError(t, err)
	tx, err := b.db.BeginTx(ctx, nil)
	require.NoError(t, err)
	_, err = tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock(hashtextextended(?, 0))", b.store.rollLockKey())
	require.NoError(t, err)

	q := InsightsQuery{Graph: "store"}.WithDefaults()
	ins, err := b.store.Insights(ctx, q)
	require.NoError(t, err)
	require.Positive(t, ins.Pending)
	require.Zero(t, ins.Executions)

	require.NoError(t, tx.Rollback())
	ins, err = b.store.Insights(ctx, q)
	require.NoError(t, err)
	require.Zero(t, ins.Pending)
	require.EqualValues(t, 1, ins.Executions)
}
